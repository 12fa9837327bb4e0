package metadata

import (
	"slices"
	"strings"
)

// createUser: User, PasswordHash (opaque, non-empty), Perms (a non-empty
// subset of admin, produce, consume; stored sorted without duplicates).
func (s *State) createUser(c *Command) Result {
	if !validName(c.User) || c.PasswordHash == "" {
		return failed(ErrInvalidCommand)
	}
	perms, ok := normalPerms(c.Perms)
	if !ok {
		return failed(ErrInvalidPermissions)
	}
	if _, ok := s.users[c.User]; ok {
		return failed(ErrUserExists)
	}
	s.lastUser++
	s.users[c.User] = &User{Name: c.User, PasswordHash: c.PasswordHash, Perms: perms, Serial: s.lastUser}
	return Result{}
}

func normalPerms(in []string) ([]string, bool) {
	if len(in) == 0 {
		return nil, false
	}
	for _, p := range in {
		if p != PermAdmin && p != PermProduce && p != PermConsume {
			return nil, false
		}
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out), true
}

// deleteUser: User. Its ACLs go with it.
func (s *State) deleteUser(c *Command) Result {
	u, ok := s.users[c.User]
	if !ok {
		return failed(ErrUserNotFound)
	}
	if c.KeepAdmin && slices.Contains(u.Perms, PermAdmin) && s.admins() == 1 {
		return failed(ErrLastAdmin)
	}
	delete(s.users, c.User)
	delete(s.acls, c.User)
	return Result{}
}

// admins counts the users holding the admin permission.
func (s *State) admins() int {
	n := 0
	for _, u := range s.users {
		if slices.Contains(u.Perms, PermAdmin) {
			n++
		}
	}
	return n
}

// setPassword: User, PasswordHash.
func (s *State) setPassword(c *Command) Result {
	if c.PasswordHash == "" {
		return failed(ErrInvalidCommand)
	}
	u, ok := s.users[c.User]
	if !ok {
		return failed(ErrUserNotFound)
	}
	u.PasswordHash = c.PasswordHash
	return Result{}
}

// grantACL: User (must exist), Operation, Pattern. Granting twice is a no-op.
func (s *State) grantACL(c *Command) Result {
	acl, err := checkACL(c)
	if err != "" {
		return failed(err)
	}
	if _, ok := s.users[c.User]; !ok {
		return failed(ErrUserNotFound)
	}
	list := s.acls[c.User]
	i, found := slices.BinarySearchFunc(list, acl, compareACLs)
	if !found {
		s.acls[c.User] = slices.Insert(slices.Clip(list), i, acl)
	}
	return Result{}
}

// revokeACL: User, Operation, Pattern. Idempotent: revoking a grant that
// does not exist (or of an unknown user) succeeds and changes nothing.
func (s *State) revokeACL(c *Command) Result {
	acl, err := checkACL(c)
	if err != "" {
		return failed(err)
	}
	list := s.acls[c.User]
	i, found := slices.BinarySearchFunc(list, acl, compareACLs)
	switch {
	case !found:
	case len(list) == 1:
		delete(s.acls, c.User)
	default:
		s.acls[c.User] = slices.Delete(slices.Clone(list), i, i+1)
	}
	return Result{}
}

func checkACL(c *Command) (ACL, Error) {
	switch {
	case !validName(c.User):
		return ACL{}, ErrInvalidCommand
	case c.Operation != OpProduce && c.Operation != OpConsume:
		return ACL{}, ErrInvalidOperation
	case !validPattern(c.Pattern):
		return ACL{}, ErrInvalidTopicName
	}
	return ACL{User: c.User, Operation: c.Operation, Pattern: c.Pattern}, ""
}

// validPattern: "*", "prefix*" with prefix made of topic-name characters,
// or a valid topic name.
func validPattern(p string) bool {
	prefix, wild := strings.CutSuffix(p, "*")
	if !wild {
		return validTopicName(p)
	}
	for i := 0; i < len(prefix); i++ {
		if !topicChar(prefix[i]) {
			return false
		}
	}
	return len(prefix) < MaxTopicNameLen
}

// initCluster: ClusterSecret (MinSecretLen..MaxSecretLen bytes), ClusterID
// (optional). Once only: the secret keys cursor MACs, and changing it would
// invalidate every cursor in flight.
func (s *State) initCluster(c *Command) Result {
	if len(c.ClusterSecret) < MinSecretLen || len(c.ClusterSecret) > MaxSecretLen ||
		len(c.ClusterID) > MaxNameLen {
		return failed(ErrInvalidCommand)
	}
	if s.clusterSecret != nil {
		return failed(ErrAlreadyExists)
	}
	s.clusterID = c.ClusterID
	s.clusterSecret = slices.Clone(c.ClusterSecret)
	return Result{}
}
