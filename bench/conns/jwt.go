package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// A throwaway token issuer for the restart run. 10,000 first logins by
// password take 10,000 argon2id hashes (minutes on two cores), so most
// of the restart run's clients log in first with a JWT (token_auth, a
// signature check); after the restart every client resumes its login
// session the same way, by session token, whatever its first login was.

const (
	jwtIssuer   = "conns-bench"
	jwtAudience = "malachi"
	jwtKid      = "conns-ed"
	jwtKeyFile  = "jwt.key"
	jwksFile    = "jwks.json"
)

// runJWKS writes a new Ed25519 key (DIR/jwt.key) and its public key set
// (DIR/jwks.json) for `malachi serve --jwt-jwks`.
func runJWKS(args []string) error {
	fs := flag.NewFlagSet("jwks", flag.ContinueOnError)
	dir := fs.String("dir", "", "where to write jwt.key and jwks.json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("jwks needs -dir")
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	set, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: pub, KeyID: jwtKid, Use: "sig", Algorithm: "EdDSA"}}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, jwtKeyFile), []byte(hex.EncodeToString(key.Seed())), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*dir, jwksFile), set, 0o644); err != nil {
		return err
	}
	fmt.Printf("--jwt-jwks %s --jwt-issuer %s --jwt-audience %s\n", filepath.Join(*dir, jwksFile), jwtIssuer, jwtAudience)
	return nil
}

// signJWT returns a token for benchUser, valid for an hour, signed with
// the key runJWKS wrote to keyFile.
func signJWT(keyFile string) (string, error) {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return "", err
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return "", fmt.Errorf("%s: not an Ed25519 seed in hex", keyFile)
	}
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": jwtIssuer, "aud": jwtAudience, "sub": benchUser,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	tok.Header["kid"] = jwtKid
	return tok.SignedString(ed25519.NewKeyFromSeed(seed))
}
