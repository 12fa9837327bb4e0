package auth

import "testing"

func TestValidPerms(t *testing.T) {
	for _, tt := range []struct {
		perms []string
		want  bool
	}{
		{nil, true},
		{[]string{"admin"}, true},
		{[]string{"produce", "consume"}, true},
		{[]string{"produce", "produce"}, false},
		{[]string{"read"}, false},
		{[]string{"Admin"}, false},
		{[]string{""}, false},
	} {
		if got := ValidPerms(tt.perms); got != tt.want {
			t.Errorf("ValidPerms(%q) = %v, want %v", tt.perms, got, tt.want)
		}
	}
}

func TestValidOperationAndPattern(t *testing.T) {
	for op, want := range map[string]bool{"produce": true, "consume": true, "admin": false, "": false, "Produce": false} {
		if ValidOperation(op) != want {
			t.Errorf("ValidOperation(%q) != %v", op, want)
		}
	}
	long := make([]byte, MaxPatternLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for p, want := range map[string]bool{
		"orders": true, "orders.*": true, "*": true, "orders*": true,
		"": false, "*orders": false, "or*ders": false, "**": false, string(long): false, string(long[1:]): true,
	} {
		if ValidPattern(p) != want {
			t.Errorf("ValidPattern(%q) != %v", p, want)
		}
	}
}

func TestMatchPattern(t *testing.T) {
	for _, tt := range []struct {
		pattern, topic string
		want           bool
	}{
		{"orders", "orders", true},
		{"orders", "orders.eu", false},
		{"orders", "order", false},
		{"orders.*", "orders.eu", true},
		{"orders.*", "orders.", true},
		{"orders.*", "orders", false},
		{"orders.*", "ordersX", false},
		{"*", "anything", true},
		{"*", "", true},
		{"or*ders", "or*ders", false},
	} {
		if got := MatchPattern(tt.pattern, tt.topic); got != tt.want {
			t.Errorf("MatchPattern(%q, %q) = %v, want %v", tt.pattern, tt.topic, got, tt.want)
		}
	}
}

func TestAllowed(t *testing.T) {
	grants := []Grant{{"produce", "orders.*"}, {"consume", "audit"}}
	tests := []struct {
		name   string
		perms  []string
		grants []Grant
		strict bool
		op     string
		topic  string
		want   bool
	}{
		{"admin, strict", []string{"admin"}, nil, true, "produce", "x", true},
		{"admin, unknown op", []string{"admin"}, nil, true, "delete", "x", true},
		{"coarse perm, lax", []string{"produce"}, nil, false, "produce", "x", true},
		{"coarse perm, other op", []string{"produce"}, nil, false, "consume", "x", false},
		{"coarse perm, strict, no grant", []string{"produce"}, nil, true, "produce", "x", false},
		{"strict, prefix grant", []string{"produce"}, grants, true, "produce", "orders.eu", true},
		{"strict, prefix grant misses", []string{"produce"}, grants, true, "produce", "orders", false},
		{"strict, grant of other op", []string{"consume"}, grants, true, "consume", "orders.eu", false},
		{"strict, literal grant", nil, grants, true, "consume", "audit", true},
		{"lax, grant without perm", nil, grants, false, "consume", "audit", true},
		{"lax, nothing", nil, grants, false, "consume", "other", false},
		{"unknown op", []string{"produce", "consume"}, []Grant{{"delete", "*"}}, false, "delete", "x", false},
		{"wildcard", nil, []Grant{{"consume", "*"}}, true, "consume", "any", true},
	}
	for _, tt := range tests {
		if got := Allowed(tt.perms, tt.grants, tt.strict, tt.op, tt.topic); got != tt.want {
			t.Errorf("%s: Allowed = %v, want %v", tt.name, got, tt.want)
		}
	}
}
