// Package auth holds the security decisions of a node: password hashing and
// verification, session tokens, permissions and per-topic ACL checks.
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
// hold usable secrets) with a fixed time to live and a bound on how many live
// at once. Time is passed in (unix milliseconds); expired sessions are
// reaped lazily.
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
