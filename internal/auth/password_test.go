package auth

import (
	"encoding/base64"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// fastParams keeps tests quick; production uses DefaultParams.
var fastParams = Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

func TestDefaultParamsAreOWASP(t *testing.T) {
	want := Params{Memory: 9216, Time: 4, Threads: 1, SaltLen: 16, KeyLen: 32}
	if DefaultParams() != want {
		t.Fatalf("DefaultParams() = %+v, want %+v", DefaultParams(), want)
	}
}

// TestHashPasswordDefault runs the real cost once: format and round trip.
func TestHashPasswordDefault(t *testing.T) {
	h, err := HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\$argon2id\$v=19\$m=9216,t=4,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)
	if !re.MatchString(h) {
		t.Fatalf("hash %q is not the expected PHC string", h)
	}
	if ok, err := VerifyPassword(h, "correct horse"); !ok || err != nil {
		t.Fatalf("VerifyPassword = %v, %v", ok, err)
	}
}

func TestVerify(t *testing.T) {
	h, err := HashPasswordWith("s3cret", fastParams)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := HashPasswordWith("s3cret", fastParams)
	if h == h2 {
		t.Fatal("two hashes of one password share a salt")
	}
	for _, tt := range []struct {
		pw   string
		want bool
	}{{"s3cret", true}, {"s3cret ", false}, {"S3cret", false}, {"", false}, {strings.Repeat("x", MaxPasswordLen+1), false}} {
		ok, err := VerifyPassword(h, tt.pw)
		if err != nil || ok != tt.want {
			t.Errorf("VerifyPassword(%q) = %v, %v; want %v", tt.pw, ok, err, tt.want)
		}
	}
	// Changing the stored key or salt breaks the match.
	parts := strings.Split(h, "$")
	key, _ := base64.RawStdEncoding.DecodeString(parts[5])
	key[0] ^= 1
	parts[5] = base64.RawStdEncoding.EncodeToString(key)
	if ok, err := VerifyPassword(strings.Join(parts, "$"), "s3cret"); ok || err != nil {
		t.Fatalf("tampered key: %v, %v", ok, err)
	}
}

func TestHashRejects(t *testing.T) {
	if _, err := HashPasswordWith(strings.Repeat("x", MaxPasswordLen+1), fastParams); !errors.Is(err, ErrPasswordTooLong) {
		t.Fatalf("long password: %v", err)
	}
	bad := fastParams
	bad.Time = 0
	if _, err := HashPasswordWith("x", bad); !errors.Is(err, ErrInvalidHash) {
		t.Fatalf("t=0: %v", err)
	}
}

func TestVerifyRejectsMalformed(t *testing.T) {
	salt := base64.RawStdEncoding.EncodeToString(make([]byte, 16))
	key := base64.RawStdEncoding.EncodeToString(make([]byte, 32))
	phc := func(alg, v, params, s, k string) string {
		return "$" + alg + "$" + v + "$" + params + "$" + s + "$" + k
	}
	good := "m=64,t=1,p=1"
	tests := map[string]string{
		"empty":               "",
		"argon2i":             phc("argon2i", "v=19", good, salt, key),
		"bcrypt":              "$2a$10$abcdefghijklmnopqrstuv",
		"version 16":          phc("argon2id", "v=16", good, salt, key),
		"missing field":       "$argon2id$v=19$" + good + "$" + salt,
		"extra field":         phc("argon2id", "v=19", good, salt, key) + "$x",
		"params order":        phc("argon2id", "v=19", "t=1,m=64,p=1", salt, key),
		"params missing":      phc("argon2id", "v=19", "m=64,t=1", salt, key),
		"params sign":         phc("argon2id", "v=19", "m=+64,t=1,p=1", salt, key),
		"memory too big":      phc("argon2id", "v=19", "m=262145,t=1,p=1", salt, key),
		"memory overflow":     phc("argon2id", "v=19", "m=99999999999,t=1,p=1", salt, key),
		"memory below 8p":     phc("argon2id", "v=19", "m=15,t=1,p=2", salt, key),
		"time zero":           phc("argon2id", "v=19", "m=64,t=0,p=1", salt, key),
		"time too big":        phc("argon2id", "v=19", "m=64,t=11,p=1", salt, key),
		"threads zero":        phc("argon2id", "v=19", "m=64,t=1,p=0", salt, key),
		"threads too big":     phc("argon2id", "v=19", "m=256,t=1,p=17", salt, key),
		"threads overflow u8": phc("argon2id", "v=19", "m=4096,t=1,p=257", salt, key),
		"short salt":          phc("argon2id", "v=19", good, "AAAA", key),
		"short key":           phc("argon2id", "v=19", good, salt, "AAAA"),
		"padded salt":         phc("argon2id", "v=19", good, salt+"==", key),
		"bad base64":          phc("argon2id", "v=19", good, salt, "!!!!"+key[4:]),
		"too long":            phc("argon2id", "v=19", good, salt, strings.Repeat("A", 300)),
	}
	for name, h := range tests {
		ok, err := VerifyPassword(h, "x")
		if ok || !errors.Is(err, ErrInvalidHash) {
			t.Errorf("%s: VerifyPassword = %v, %v; want ErrInvalidHash", name, ok, err)
		}
	}
	// The limits themselves are accepted (checked without running argon2
	// at 256 MiB).
	if _, _, _, err := decodePHC(phc("argon2id", "v=19", "m=262144,t=10,p=16", salt, key)); err != nil {
		t.Errorf("parameters at the limits: %v", err)
	}
}

func TestDummyVerify(t *testing.T) {
	p, _, _, err := decodePHC(dummyHash)
	if err != nil {
		t.Fatal(err)
	}
	if p != DefaultParams() {
		t.Fatalf("dummy hash parameters %+v, want the defaults", p)
	}
	DummyVerify("anything")
}

func TestGeneratePassword(t *testing.T) {
	a, b := GeneratePassword(), GeneratePassword()
	if len(a) != 32 || a == b {
		t.Fatalf("GeneratePassword gave %q and %q", a, b)
	}
	raw, err := base64.RawURLEncoding.DecodeString(a)
	if err != nil || len(raw) != 24 {
		t.Fatalf("%q is not 24 bytes of base64url: %v", a, err)
	}
}

func FuzzVerifyPassword(f *testing.F) {
	h, _ := HashPasswordWith("pw", fastParams)
	f.Add(h)
	f.Add("$argon2id$v=19$m=64,t=1,p=1$$")
	f.Add("$argon2id$v=19$m=262145,t=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		p, _, _, err := decodePHC(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidHash) {
				t.Fatalf("error %v does not wrap ErrInvalidHash", err)
			}
			return
		}
		if p.Validate() != nil || p.Memory > fastParams.Memory*16 {
			return // valid but too costly to run inside the fuzzer
		}
		if _, err := VerifyPassword(s, "pw"); err != nil {
			t.Fatal(err)
		}
	})
}
