package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/malachi-log/malachi/internal/audit"
)

// One address sending thousands of refused logins with huge user names
// must not rotate an administrator's audit event out of every file:
// throttled refusals are reported once per window, names are clipped.
func TestAuditFloodCannotRotateHistoryAway(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	b, _ := openAuth(t, AuthConfig{Audit: audit.Config{Path: path, MaxFileBytes: 1 << 20, MaxFiles: 2}})
	ctx := context.Background()
	b.CreateUser(ctx, "evidence-marker", "pw", []string{"consume"})
	b.Audit(Identity{User: "admin"}, "user_created", "evidence-marker", nil, "")
	big := make([]byte, 8000)
	for i := range big {
		big[i] = 'A'
	}
	start := time.Now()
	for i := 0; i < 12000; i++ {
		b.Login(ctx, Credentials{Method: MethodPassword, User: string(big), Password: "x", Addr: "198.51.100.7"})
	}
	b.Close()
	t.Logf("12000 refused logins from one address in %v", time.Since(start))
	found := false
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		if strings.Contains(string(raw), "evidence-marker") {
			found = true
		}
	}
	if !found {
		t.Errorf("the admin event was rotated out of every audit file (%d files) by one address's refused logins", len(files))
	}
}
