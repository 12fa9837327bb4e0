// Package auth holds the security decisions of a node: password hashing and
// verification, login tokens, the login throttle, certificate and token
// identities, permissions and per-topic ACL checks. It does no I/O.
//
// # Passwords
//
// Passwords are hashed with argon2id (golang.org/x/crypto/argon2) and stored
// as PHC strings:
//
//	$argon2id$v=19$m=9216,t=4,p=1$<salt>$<key>
//
// salt and key are standard base64 without padding. The defaults are one of
// OWASP's equivalent argon2id settings: 9 MiB of memory, 4 passes, 1 lane,
// a 16-byte random salt and a 32-byte key (the same strength as 19 MiB and
// 2 passes, at half the memory per login). VerifyPassword reads the parameters
// from the stored string (so hashes made with older parameters keep working)
// but refuses parameters beyond MaxMemoryKiB, MaxTime and MaxThreads, so a
// planted hash cannot make one login cost unbounded memory or time. Keys are
// compared in constant time. DummyVerify runs the same computation against a
// fixed hash for logins naming an unknown user, so the response time does not
// reveal which user names exist.
//
// # Sessions
//
// A successful login yields a token: 32 random bytes, base64url without
// padding. Sessions keeps tokens (by their SHA-256, so the table does not
// hold usable secrets) with a fixed time to live, bounded per user and
// overall: a new session past a bound ends the oldest of that user (or of
// the node), so the table never refuses a login and one user cannot fill
// it for the others. Time is passed in (unix milliseconds); expired
// sessions are reaped lazily.
//
// # Login throttle
//
// Guard is a pure state machine (time in, no locks, bounded tables): a
// progressive lockout keyed by (user, client address) and token buckets
// bounding failed logins per address and per user. Only failures count.
//
// # Certificates and tokens
//
// VerifiedLeaf and CertUser turn a TLS client certificate into a user name
// by a documented rule (subject CN, or the first email, DNS or URI SAN).
// VerifyToken checks a JWT against a KeySet parsed from a JSON Web Key Set,
// accepting only RS256, ES256 and EdDSA, and checks iss, aud, exp, nbf and
// iat with a leeway.
//
// # Permissions and ACLs
//
// A user has coarse permissions: admin (superuser), produce and consume. A
// grant allows one operation (produce or consume) on the topics a pattern
// names: a literal topic name, a prefix ending in "*" ("orders.*" matches
// every topic starting with "orders."), or "*" for every topic. Grants only
// allow; there are no deny rules. Allowed decides:
//
//  1. admin allows everything;
//  2. outside strict mode, the coarse permission for the operation allows
//     every topic;
//  3. otherwise a grant for the operation whose pattern matches the topic is
//     needed.
package auth
