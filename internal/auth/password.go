package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Bounds on stored hash parameters. VerifyPassword refuses anything beyond
// them rather than spend the memory or time.
const (
	MaxMemoryKiB   = 256 << 10 // 256 MiB
	MaxTime        = 10
	MaxThreads     = 16
	MinSaltLen     = 8
	MaxSaltLen     = 64
	MinKeyLen      = 16
	MaxKeyLen      = 64
	MaxPasswordLen = 1024 // bytes
	// maxEncodedLen comfortably fits the largest valid PHC string.
	maxEncodedLen = 256
)

// argon2Version is the only argon2 version produced and accepted (0x13).
const argon2Version = argon2.Version

var (
	// ErrInvalidHash is returned (wrapped) for a stored hash that is not a
	// well-formed argon2id PHC string with acceptable parameters.
	ErrInvalidHash = errors.New("auth: invalid password hash")
	// ErrPasswordTooLong is returned when hashing a password over
	// MaxPasswordLen bytes.
	ErrPasswordTooLong = errors.New("auth: password too long")
)

// Params are argon2id cost parameters.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8  // lanes
	SaltLen uint32 // bytes
	KeyLen  uint32 // bytes
}

// DefaultParams returns one of OWASP's equivalent argon2id settings:
// m=9216 KiB, t=4, p=1, a 16-byte salt and a 32-byte key. Of the settings
// OWASP lists as equally strong, this one costs half the memory of
// m=19456,t=2 for the same work, so a burst of logins does not spike a
// node's memory by 19 MiB each.
func DefaultParams() Params {
	return Params{Memory: 9216, Time: 4, Threads: 1, SaltLen: 16, KeyLen: 32}
}

// Validate reports whether argon2id can run with p within the package bounds.
func (p Params) Validate() error {
	switch {
	case p.Time < 1 || p.Time > MaxTime:
		return fmt.Errorf("%w: t=%d", ErrInvalidHash, p.Time)
	case p.Threads < 1 || p.Threads > MaxThreads:
		return fmt.Errorf("%w: p=%d", ErrInvalidHash, p.Threads)
	case p.Memory < 8*uint32(p.Threads) || p.Memory > MaxMemoryKiB:
		return fmt.Errorf("%w: m=%d", ErrInvalidHash, p.Memory)
	case p.SaltLen < MinSaltLen || p.SaltLen > MaxSaltLen:
		return fmt.Errorf("%w: salt of %d bytes", ErrInvalidHash, p.SaltLen)
	case p.KeyLen < MinKeyLen || p.KeyLen > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes", ErrInvalidHash, p.KeyLen)
	}
	return nil
}

// HashPassword hashes password with DefaultParams and a fresh random salt.
func HashPassword(password string) (string, error) {
	return HashPasswordWith(password, DefaultParams())
}

// HashPasswordWith hashes password with p and a fresh random salt. Lower
// costs than the defaults are meant for tests only.
func HashPasswordWith(password string, p Params) (string, error) {
	if len(password) > MaxPasswordLen {
		return "", ErrPasswordTooLong
	}
	if err := p.Validate(); err != nil {
		return "", err
	}
	salt := make([]byte, p.SaltLen)
	rand.Read(salt) // never fails (crypto/rand, Go 1.24+)
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return encodePHC(p, salt, key), nil
}

// VerifyPassword reports whether password matches the stored PHC string
// encoded. A malformed string or one with parameters beyond the bounds
// returns false and an error wrapping ErrInvalidHash, before any hashing.
func VerifyPassword(encoded, password string) (bool, error) {
	p, salt, key, err := decodePHC(encoded)
	if err != nil {
		return false, err
	}
	if len(password) > MaxPasswordLen {
		return false, nil
	}
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, p.KeyLen)
	return subtle.ConstantTimeCompare(got, key) == 1, nil
}

// dummyHash has the default parameters; its key matches no password anyone
// knows. Only the cost matters.
var dummyHash = encodePHC(DefaultParams(), []byte("malachi-dummy-sa"), make([]byte, 32))

// DummyVerify does the work of VerifyPassword against a default-cost hash
// and discards the answer. Call it when a login names an unknown user.
func DummyVerify(password string) {
	_, _ = VerifyPassword(dummyHash, password)
}

func encodePHC(p Params, salt, key []byte) string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2Version, p.Memory, p.Time, p.Threads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

// decodePHC parses "$argon2id$v=19$m=M,t=T,p=P$salt$key" strictly.
func decodePHC(s string) (p Params, salt, key []byte, err error) {
	if len(s) > maxEncodedLen {
		return p, nil, nil, fmt.Errorf("%w: %d bytes", ErrInvalidHash, len(s))
	}
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, fmt.Errorf("%w: not an argon2id PHC string", ErrInvalidHash)
	}
	if parts[2] != "v="+strconv.Itoa(argon2Version) {
		return p, nil, nil, fmt.Errorf("%w: version %q", ErrInvalidHash, parts[2])
	}
	if p, err = parseParams(parts[3]); err != nil {
		return p, nil, nil, err
	}
	salt, err1 := base64.RawStdEncoding.Strict().DecodeString(parts[4])
	key, err2 := base64.RawStdEncoding.Strict().DecodeString(parts[5])
	if err := errors.Join(err1, err2); err != nil {
		return p, nil, nil, fmt.Errorf("%w: %v", ErrInvalidHash, err)
	}
	p.SaltLen, p.KeyLen = uint32(len(salt)), uint32(len(key))
	if err := p.Validate(); err != nil {
		return p, nil, nil, err
	}
	return p, salt, key, nil
}

// parseParams parses "m=M,t=T,p=P" in that order.
func parseParams(s string) (Params, error) {
	fields := strings.Split(s, ",")
	var vals [3]uint64
	for i, name := range []string{"m=", "t=", "p="} {
		if len(fields) != 3 || !strings.HasPrefix(fields[i], name) {
			return Params{}, fmt.Errorf("%w: parameters %q", ErrInvalidHash, s)
		}
		v, err := strconv.ParseUint(fields[i][len(name):], 10, 32)
		if err != nil {
			return Params{}, fmt.Errorf("%w: parameters %q", ErrInvalidHash, s)
		}
		vals[i] = v
	}
	if vals[2] > MaxThreads {
		return Params{}, fmt.Errorf("%w: p=%d", ErrInvalidHash, vals[2])
	}
	return Params{Memory: uint32(vals[0]), Time: uint32(vals[1]), Threads: uint8(vals[2])}, nil
}

// GeneratePassword returns 24 random bytes (192 bits) as base64url without
// padding, for seeded accounts that were given no password.
func GeneratePassword() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
