package wire

// Response is an ok response payload. Every response type implements it
// with a value receiver and also has a pointer method
// Decode(payload []byte) error that decodes exactly. Which type answers
// which key is listed in docs/wire.md; keys whose answer is empty use
// EmptyResponse (or a nil Response when encoding).
type Response interface {
	// AppendPayload appends the payload (without frame or header) to dst.
	AppendPayload(dst []byte) []byte
}

// EmptyResponse is the empty ok payload of operations that return nothing
// (create_topic, commit, leave_group, user and ACL changes, delete_topic,
// create_topic_ex). Its Decode insists the payload is empty.
type EmptyResponse struct{}

func (EmptyResponse) AppendPayload(dst []byte) []byte { return dst }
func (*EmptyResponse) Decode(payload []byte) error    { return decodeEmpty(payload, "empty response") }

// TokenResponse answers auth (0), mtls_auth (12) and token_auth (13):
// str(token).
type TokenResponse struct{ Token string }

func (r TokenResponse) AppendPayload(dst []byte) []byte { return appendString(dst, r.Token) }

func (r *TokenResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = TokenResponse{Token: d.str()}
	return d.finish("token response")
}

// CountResponse answers produce (2): count:u32, the number of records
// accepted. Produce never answers offsets.
type CountResponse struct{ Count uint32 }

func (r CountResponse) AppendPayload(dst []byte) []byte { return appendU32(dst, r.Count) }

func (r *CountResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = CountResponse{Count: d.u32()}
	return d.finish("count response")
}

// FetchResponse answers fetch (3) and is the payload of every subscribe
// push: list(record) str(next_cursor).
type FetchResponse struct {
	Records    []Record
	NextCursor *string
}

func (r FetchResponse) AppendPayload(dst []byte) []byte {
	return appendNStr(AppendRecords(dst, r.Records), r.NextCursor)
}

// Decode decodes a fetch payload. Like ProduceRequest.Decode it reuses the
// capacity of r.Records, and the records' byte slices alias payload.
func (r *FetchResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	r.Records = d.records(r.Records)
	r.NextCursor = d.nstr()
	return d.finish("fetch response")
}

// UserEntry is one user in a ListUsersResponse: str(user) list(str perm).
type UserEntry struct {
	User  string
	Perms []string
}

// ListUsersResponse answers list_users (11): list(UserEntry).
type ListUsersResponse struct{ Users []UserEntry }

const minUserEntryLen = minPresent + 4

func (r ListUsersResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(dst, uint32(len(r.Users)))
	for _, u := range r.Users {
		dst = appendStrings(appendString(dst, u.User), u.Perms)
	}
	return dst
}

func (r *ListUsersResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ListUsersResponse{Users: list(&d, minUserEntryLen, func() UserEntry {
		return UserEntry{User: d.str(), Perms: d.strs()}
	})}
	return d.finish("list_users response")
}

// ACLEntry is one grant in a ListACLsResponse: str(operation) str(resource).
type ACLEntry struct{ Operation, Resource string }

// ListACLsResponse answers list_acls (16): list(ACLEntry).
type ListACLsResponse struct{ ACLs []ACLEntry }

const minACLEntryLen = 2 * minPresent

func (r ListACLsResponse) AppendPayload(dst []byte) []byte {
	dst = appendU32(dst, uint32(len(r.ACLs)))
	for _, a := range r.ACLs {
		dst = appendString(appendString(dst, a.Operation), a.Resource)
	}
	return dst
}

func (r *ListACLsResponse) Decode(payload []byte) error {
	d := decoder{b: payload}
	*r = ListACLsResponse{ACLs: list(&d, minACLEntryLen, func() ACLEntry {
		return ACLEntry{Operation: d.str(), Resource: d.str()}
	})}
	return d.finish("list_acls response")
}
