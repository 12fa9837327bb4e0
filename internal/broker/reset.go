package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/malachi-log/malachi/internal/auth"
	"github.com/malachi-log/malachi/internal/metadata"
	"github.com/malachi-log/malachi/internal/metastore"
	"github.com/malachi-log/malachi/internal/vfs"
)

// ErrNoDataDir means the directory holds no node's metadata.
var ErrNoDataDir = errors.New("broker: not a data directory (no metadata)")

// ResetPassword is the offline recovery of a node whose administrators are
// lost: on a stopped node's data directory it sets user's password, and
// creates user with the admin permission when no such user exists (created
// reports which). An existing user keeps its permissions; to regain admin
// when every admin is gone, name a user that does not exist.
//
// It takes the data directory's lock, so it fails with ErrDataDirLocked
// while a node serves the directory: a running node holds the metadata in
// memory and would never see the change. It never creates a data
// directory (ErrNoDataDir).
func ResetPassword(dataDir, user, newPassword string) (created bool, err error) {
	if !validPassword(newPassword) {
		return false, ErrInvalidPassword
	}
	metaDir := filepath.Join(dataDir, "meta")
	if fi, err := os.Stat(metaDir); err != nil || !fi.IsDir() {
		return false, fmt.Errorf("%w: %s", ErrNoDataDir, dataDir)
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return false, err
	}
	defer lock.Close()
	meta, err := metastore.Open(vfs.OS(), metaDir, metastore.Options{})
	if err != nil {
		return false, fmt.Errorf("broker: metadata: %w", err)
	}
	hash, err := auth.HashPassword(newPassword)
	if err != nil {
		meta.Close()
		return false, err
	}
	var exists bool
	meta.View(func(st *metadata.State) { _, exists = st.User(user) })
	cmd := metadata.Command{V: metadata.Version, Kind: metadata.KindSetPassword, User: user, PasswordHash: hash, Now: time.Now().UnixMilli()}
	if !exists {
		cmd.Kind, cmd.Perms = metadata.KindCreateUser, []string{auth.PermAdmin}
	}
	res, err := meta.Apply(context.Background(), cmd)
	if err == nil {
		err = res.Err
	}
	if cerr := meta.Close(); err == nil {
		err = cerr
	}
	return err == nil && !exists, err
}
