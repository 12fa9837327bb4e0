package main

import (
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/malachi-log/malachi/internal/broker"
)

// securityFlags are serve's settings for logins, identities, the audit log
// and quotas. Zero values take the broker's documented defaults.
type securityFlags struct {
	auth                 broker.AuthConfig
	limits               broker.Limits
	maxGroups            int
	maxMembersPerGroup   int
	aclStrict            bool
	allowOpenPermissions bool
}

func (s *securityFlags) register(fl *pflag.FlagSet) {
	a := &s.auth
	fl.BoolVar(&s.aclStrict, "acl-strict", os.Getenv("MALACHI_ACL_STRICT") == "true", "non-admin users need an ACL grant per topic; views show only what they may see (env MALACHI_ACL_STRICT=true)")
	fl.BoolVar(&s.allowOpenPermissions, "allow-open-permissions", os.Getenv("MALACHI_ALLOW_OPEN_PERMISSIONS") == "true", "start on a data directory that others may read, owned by another user (env MALACHI_ALLOW_OPEN_PERMISSIONS=true)")

	fl.IntVar(&a.MaxFailures, "lockout-failures", int(envInt("MALACHI_LOCKOUT_FAILURES", 5)), "failed logins of one user from one address that lock them out (env MALACHI_LOCKOUT_FAILURES)")
	fl.DurationVar(&a.Lockout, "lockout-duration", envDuration("MALACHI_LOCKOUT_DURATION_MS", 5*time.Minute), "first lockout; later ones grow x3, x9, x24, x72 (env MALACHI_LOCKOUT_DURATION_MS)")
	fl.IntVar(&a.HashConcurrency, "login-hash-concurrency", int(envInt("MALACHI_LOGIN_HASH_CONCURRENCY", 0)), "password hashes run at once; 0 = one per CPU (env MALACHI_LOGIN_HASH_CONCURRENCY)")
	fl.IntVar(&a.LoginQueue, "login-queue", int(envInt("MALACHI_LOGIN_QUEUE", 0)), "password logins that may wait for a hash; past it rate_limit_exceeded with a retry hint; 0 = 1024 (env MALACHI_LOGIN_QUEUE)")
	fl.IntVar(&a.LoginQueuePerAddr, "login-queue-per-ip", int(envInt("MALACHI_LOGIN_QUEUE_PER_IP", 0)), "of those, from one client address; 0 = 64 (env MALACHI_LOGIN_QUEUE_PER_IP)")
	fl.DurationVar(&a.SessionTTL, "session-ttl", envDuration("MALACHI_SESSION_TTL_MS", time.Hour), "how long a login's session token can log a new connection in (session_auth); negative turns resumption off (env MALACHI_SESSION_TTL_MS)")
	fl.DurationVar(&a.SessionMaxAge, "session-max-age", envDuration("MALACHI_SESSION_MAX_AGE_MS", 24*time.Hour), "how long resuming can renew a login session, from its password, certificate or JWT login (env MALACHI_SESSION_MAX_AGE_MS)")
	fl.IntVar(&a.AddrFailureBurst, "login-failures-per-ip", int(envInt("MALACHI_LOGIN_FAILURES_PER_IP", 30)), "failed logins per client address per minute before rate_limit_exceeded (env MALACHI_LOGIN_FAILURES_PER_IP)")

	fl.BoolVar(&a.MTLS.Enabled, "mtls-auth", os.Getenv("MALACHI_MTLS_AUTH") == "true", "accept mtls_auth logins: the user comes from the verified client certificate; needs --tls-client-ca (env MALACHI_MTLS_AUTH=true)")
	fl.StringVar(&a.MTLS.Identity, "mtls-identity", envString("MALACHI_MTLS_IDENTITY", "cn"), "which certificate field names the user: cn, san:email, san:dns or san:uri (env MALACHI_MTLS_IDENTITY)")

	o := &a.OIDC
	fl.StringVar(&o.JWKSFile, "jwt-jwks", envString("MALACHI_JWT_JWKS", ""), "JWKS file of the token issuer's public keys; turns token_auth on (env MALACHI_JWT_JWKS)")
	fl.StringVar(&o.JWKSURL, "jwt-jwks-url", envString("MALACHI_JWT_JWKS_URL", ""), "JWKS URL of the token issuer; turns token_auth on (env MALACHI_JWT_JWKS_URL)")
	fl.StringVar(&o.Issuer, "jwt-issuer", envString("MALACHI_JWT_ISSUER", ""), "required iss of tokens (env MALACHI_JWT_ISSUER)")
	fl.StringVar(&o.Audience, "jwt-audience", envString("MALACHI_JWT_AUDIENCE", ""), "required aud of tokens (env MALACHI_JWT_AUDIENCE)")
	fl.StringVar(&o.UserClaim, "jwt-user-claim", envString("MALACHI_JWT_USER_CLAIM", "sub"), "claim that names the user (env MALACHI_JWT_USER_CLAIM)")
	fl.StringVar(&o.PermsClaim, "jwt-perms-claim", envString("MALACHI_JWT_PERMS_CLAIM", ""), "claim listing permissions; empty: the user's own permissions and ACLs (env MALACHI_JWT_PERMS_CLAIM)")

	fl.StringVar(&a.Audit.Path, "audit-log", envString("MALACHI_AUDIT_LOG", ""), "append JSON lines of logins, lockouts, admin operations and refusals to this file (env MALACHI_AUDIT_LOG)")
	fl.Int64Var(&a.Audit.MaxFileBytes, "audit-max-bytes", envInt("MALACHI_AUDIT_MAX_BYTES", 10<<20), "rotate the audit log at this size (env MALACHI_AUDIT_MAX_BYTES)")
	fl.IntVar(&a.Audit.MaxFiles, "audit-max-files", int(envInt("MALACHI_AUDIT_MAX_FILES", 5)), "rotated audit files kept (env MALACHI_AUDIT_MAX_FILES)")

	l := &s.limits
	intFlag(fl, &l.MaxTopics, "max-topics", "MALACHI_MAX_TOPICS", "topics on the node")
	intFlag(fl, &l.MaxRanges, "max-ranges", "MALACHI_MAX_RANGES", "ranges on the node, active and sealed")
	intFlag(fl, &l.MaxTopicsPerUser, "max-topics-per-user", "MALACHI_MAX_TOPICS_PER_USER", "topics one non-admin user may have created")
	intFlag(fl, &l.MaxRangesPerUser, "max-ranges-per-user", "MALACHI_MAX_RANGES_PER_USER", "ranges of the topics one non-admin user created")
	intFlag(fl, &l.MaxInitialRanges, "max-initial-ranges", "MALACHI_MAX_INITIAL_RANGES", "initial ranges a non-admin may ask for")
	intFlag(fl, &l.MaxGroupsPerTopic, "max-groups-per-topic", "MALACHI_MAX_GROUPS_PER_TOPIC", "consumer groups per topic")
	intFlag(fl, &l.MaxGroupsPerUser, "max-groups-per-user", "MALACHI_MAX_GROUPS_PER_USER", "live consumer groups one non-admin user's members created")
	intFlag(fl, &l.MaxOpenSealedFiles, "max-open-sealed-files", "MALACHI_MAX_OPEN_SEALED_FILES", "sealed segment files kept open")
	intFlag(fl, &s.maxGroups, "max-groups", "MALACHI_MAX_GROUPS", "live consumer groups on the node")
	intFlag(fl, &s.maxMembersPerGroup, "max-members-per-group", "MALACHI_MAX_MEMBERS_PER_GROUP", "members of one consumer group")
}

// intFlag registers an int flag whose 0 default means "the broker's".
func intFlag(fl *pflag.FlagSet, p *int, name, env, usage string) {
	fl.IntVar(p, name, int(envInt(env, 0)), usage+"; 0 = the default in docs/security.md (env "+env+")")
}

// apply copies the settings into the broker's Config.
func (s *securityFlags) apply(c *broker.Config) {
	c.Auth = s.auth
	c.Auth.OIDC.Enabled = s.auth.OIDC.JWKSFile != "" || s.auth.OIDC.JWKSURL != ""
	c.Limits = s.limits
	c.MaxGroups = s.maxGroups
	c.MaxMembersPerGroup = s.maxMembersPerGroup
	c.ACLStrict = s.aclStrict
	c.AllowOpenPermissions = s.allowOpenPermissions
}
