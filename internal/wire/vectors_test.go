// Vector tests: wire-v1-vectors.json holds frames exactly as the original
// clients encode requests and decode responses. For each request vector
// the frame must read, parse and decode to the listed fields, and encoding
// the decoded request must reproduce the frame byte for byte. Response
// vectors get the same treatment. The expected values are built from the
// JSON fields by hand, and every listed field must be consumed, so a
// vector field that the test forgot to check fails the test.
package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

type vectorFile struct {
	Requests  []vector `json:"requests"`
	Responses []vector `json:"responses"`
}

type vector struct {
	Name     string                     `json:"name"`
	APIKey   *uint16                    `json:"api_key"`
	Corr     *uint32                    `json:"correlation_id"`
	Fields   map[string]json.RawMessage `json:"fields"`
	FrameHex string                     `json:"frame_hex"`
}

func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	data, err := os.ReadFile("testdata/wire-v1-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(data, &vf); err != nil {
		t.Fatal(err)
	}
	if len(vf.Requests) == 0 || len(vf.Responses) == 0 {
		t.Fatal("vector file has no requests or no responses")
	}
	return vf
}

func (v vector) frame(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(v.FrameHex)
	if err != nil {
		t.Fatalf("%s: frame_hex: %v", v.Name, err)
	}
	return b
}

// readBody reads the vector's frame with ReadFrame and checks it holds
// exactly one frame.
func (v vector) readBody(t *testing.T) []byte {
	t.Helper()
	frame := v.frame(t)
	r := bytes.NewReader(frame)
	body, err := ReadFrame(r, DefaultMaxFrame, nil)
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if r.Len() != 0 {
		t.Fatalf("%d bytes after the frame", r.Len())
	}
	return body
}

func TestRequestVectors(t *testing.T) {
	for _, v := range loadVectors(t).Requests {
		t.Run(v.Name, func(t *testing.T) {
			if v.APIKey == nil || v.Corr == nil {
				t.Fatal("request vector without api_key or correlation_id")
			}
			key, corr, payload, err := ParseRequestHeader(v.readBody(t))
			if err != nil {
				t.Fatal(err)
			}
			if key != *v.APIKey || corr != *v.Corr {
				t.Fatalf("header = key %d corr %d, want key %d corr %d", key, corr, *v.APIKey, *v.Corr)
			}
			got, err := DecodeRequest(key, payload)
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			f := fieldReader{t: t, fields: v.Fields}
			want := expectedRequest(&f, key)
			f.allUsed()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded\n%s\nwant\n%s", dump(got), dump(want))
			}
			if again := AppendRequestFrame(nil, corr, got); !bytes.Equal(again, v.frame(t)) {
				t.Fatalf("re-encoded\n%x\nwant\n%x", again, v.frame(t))
			}
		})
	}
}

func TestResponseVectors(t *testing.T) {
	for _, v := range loadVectors(t).Responses {
		t.Run(v.Name, func(t *testing.T) {
			corr, code, payload, err := ParseResponse(v.readBody(t))
			if err != nil {
				t.Fatal(err)
			}
			f := fieldReader{t: t, fields: v.Fields}
			var again []byte
			if code == CodeError {
				reason, err := DecodeError(payload)
				if err != nil {
					t.Fatal(err)
				}
				if want := f.str("reason"); reason != want {
					t.Fatalf("reason = %q, want %q", reason, want)
				}
				again = AppendErrorFrame(nil, corr, reason)
			} else {
				got, want := expectedResponse(&f, v.Name)
				if err := got.Decode(payload); err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("decoded\n%s\nwant\n%s", dump(got), dump(want))
				}
				again = AppendOKFrame(nil, corr, got)
			}
			f.allUsed()
			if !bytes.Equal(again, v.frame(t)) {
				t.Fatalf("re-encoded\n%x\nwant\n%x", again, v.frame(t))
			}
		})
	}
}

// expectedRequest builds the request a vector's fields describe.
func expectedRequest(f *fieldReader, key uint16) Request {
	switch key {
	case KeyAuth:
		return &AuthRequest{User: f.nstr("user"), Password: f.nstr("password")}
	case KeyCreateTopic:
		return &CreateTopicRequest{Topic: f.nstr("topic"), Bits: uint8(f.uint("keyspace_bits"))}
	case KeyProduce:
		return &ProduceRequest{Topic: f.nstr("topic"), Records: f.records("records")}
	case KeyFetch:
		return &FetchRequest{
			Topic: f.nstr("topic"), Cursor: f.nstr("cursor"), Group: f.nstr("group"),
			Member: f.nstr("member"), Max: uint32(f.uint("max")), WaitMs: uint32(f.uint("wait_ms")),
		}
	case KeyCommit:
		return &CommitRequest{Topic: f.nstr("topic"), Group: f.nstr("group"), Cursor: f.nstr("cursor")}
	case KeySubscribe:
		return &SubscribeRequest{
			Topic: f.nstr("topic"), Group: f.nstr("group"), Member: f.nstr("member"),
			Window: uint32(f.uint("window")), Max: uint32(f.uint("max")),
		}
	case KeyStreamAck:
		return &StreamAckRequest{
			Topic: f.nstr("topic"), Group: f.nstr("group"), Member: f.nstr("member"),
			Cursor: f.nstr("cursor"), Count: uint32(f.uint("count")),
		}
	case KeyLeaveGroup:
		return &LeaveGroupRequest{Topic: f.nstr("topic"), Group: f.nstr("group"), Member: f.nstr("member")}
	case KeyCreateUser:
		return &CreateUserRequest{User: f.nstr("user"), Password: f.nstr("password"), Perms: f.nstrs("permissions")}
	case KeyDeleteUser:
		return &DeleteUserRequest{User: f.nstr("user")}
	case KeyChangePassword:
		return &ChangePasswordRequest{User: f.nstr("user"), NewPassword: f.nstr("new_password")}
	case KeyListUsers:
		return &ListUsersRequest{}
	case KeyMTLSAuth:
		return &MTLSAuthRequest{}
	case KeyTokenAuth:
		return &TokenAuthRequest{JWT: f.nstr("jwt")}
	case KeyGrantACL:
		return &GrantACLRequest{User: f.nstr("user"), Operation: f.nstr("operation"), Pattern: f.nstr("pattern")}
	case KeyRevokeACL:
		return &RevokeACLRequest{User: f.nstr("user"), Operation: f.nstr("operation"), Pattern: f.nstr("pattern")}
	case KeyListACLs:
		return &ListACLsRequest{User: f.nstr("user")}
	}
	f.t.Fatalf("no expectation for api key %d", key)
	return nil
}

// expectedResponse returns a zero value to decode into and the value a
// response vector's fields describe. Response vectors carry no api key, so
// the payload type follows from the vector's name.
func expectedResponse(f *fieldReader, name string) (got, want responseDecoder) {
	switch name {
	case "auth_ok":
		return new(TokenResponse), &TokenResponse{Token: f.str("token")}
	case "produce_ok":
		return new(CountResponse), &CountResponse{Count: uint32(f.uint("count"))}
	case "fetch_ok":
		return new(FetchResponse), &FetchResponse{Records: f.records("records"), NextCursor: f.nstr("next_cursor")}
	case "list_users_ok":
		var users []UserEntry
		for _, u := range f.objects("users") {
			users = append(users, UserEntry{User: u.str("user"), Perms: u.strs("permissions")})
			u.allUsed()
		}
		return new(ListUsersResponse), &ListUsersResponse{Users: users}
	}
	f.t.Fatalf("no expectation for response vector %q", name)
	return nil, nil
}

// fieldReader reads typed values out of a vector's fields and remembers
// which were read.
type fieldReader struct {
	t      *testing.T
	fields map[string]json.RawMessage
	used   map[string]bool
}

func (f *fieldReader) get(name string, dst any) {
	f.t.Helper()
	raw, ok := f.fields[name]
	if !ok {
		f.t.Fatalf("vector has no field %q", name)
	}
	if f.used == nil {
		f.used = map[string]bool{}
	}
	f.used[name] = true
	if err := json.Unmarshal(raw, dst); err != nil {
		f.t.Fatalf("field %q: %v", name, err)
	}
}

func (f *fieldReader) allUsed() {
	f.t.Helper()
	for name := range f.fields {
		if !f.used[name] {
			f.t.Fatalf("vector field %q was not checked", name)
		}
	}
}

func (f *fieldReader) nstr(name string) (s *string) { f.get(name, &s); return s }
func (f *fieldReader) str(name string) (s string)   { f.get(name, &s); return s }
func (f *fieldReader) uint(name string) (n uint64)  { f.get(name, &n); return n }

func (f *fieldReader) nstrs(name string) []*string {
	var list []*string
	f.get(name, &list)
	return list
}

func (f *fieldReader) strs(name string) []string {
	var list []string
	f.get(name, &list)
	return list
}

func (f *fieldReader) objects(name string) []*fieldReader {
	var list []map[string]json.RawMessage
	f.get(name, &list)
	out := make([]*fieldReader, len(list))
	for i, m := range list {
		out[i] = &fieldReader{t: f.t, fields: m}
	}
	return out
}

// records reads vector records: key (string or null), value_utf8 or
// value_hex, timestamp, and headers as [key, value] pairs.
func (f *fieldReader) records(name string) []Record {
	var recs []Record
	for _, r := range f.objects(name) {
		rec := Record{Key: bytesOf(r.nstr("key")), Timestamp: r.uint("timestamp")}
		if _, ok := r.fields["value_hex"]; ok {
			v, err := hex.DecodeString(r.str("value_hex"))
			if err != nil {
				f.t.Fatal(err)
			}
			rec.Value = v
		} else {
			rec.Value = []byte(r.str("value_utf8"))
		}
		var pairs [][2]*string
		r.get("headers", &pairs)
		for _, p := range pairs {
			rec.Headers = append(rec.Headers, Header{Key: bytesOf(p[0]), Value: bytesOf(p[1])})
		}
		r.allUsed()
		recs = append(recs, rec)
	}
	return recs
}

func bytesOf(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}
