package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestCLIDocCommandsExist resolves every `malachi ...` command docs/cli.md
// shows the way the binary does: the command path must name a command that
// runs, and its flags and number of arguments must parse.
func TestCLIDocCommandsExist(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	snippets := regexp.MustCompile("`(malachi [^`]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(snippets) < 20 {
		t.Fatalf("docs/cli.md shows only %d malachi commands", len(snippets))
	}
	for _, m := range snippets {
		for _, part := range strings.Split(strings.NewReplacer(`\|`, "|", "\n", " ").Replace(m[1]), "|") {
			line := strings.TrimSpace(part)
			line, _, _ = strings.Cut(line, "<") // input redirection
			args := shellWords(line)
			if len(args) < 2 || args[0] != "malachi" {
				continue // a bare "malachi completion bash|zsh" and the like
			}
			if err := resolves(args[1:]); err != nil {
				t.Errorf("docs/cli.md: %q: %v", line, err)
			}
		}
	}
}

func resolves(args []string) error {
	root := newRoot()
	root.InitDefaultCompletionCmd() // Execute adds it; Find alone does not
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd.HasSubCommands() {
		return fmt.Errorf("%s only groups other commands", cmd.CommandPath())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	if cmd.Args != nil {
		return cmd.Args(cmd, cmd.Flags().Args())
	}
	return nil
}

// shellWords splits a command line the way sh would for these simple
// lines: words, single and double quotes; an ellipsis, which stands for a
// value left out, becomes a placeholder word.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote != 0 && ch == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(ch)
		case ch == '\'' || ch == '"':
			quote, in = ch, true
		case ch == ' ' || ch == '\n':
			if in {
				words = append(words, placeholder(cur.String()))
			}
			cur.Reset()
			in = false
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		words = append(words, placeholder(cur.String()))
	}
	return words
}

func placeholder(w string) string {
	if w == "…" {
		return "x"
	}
	return w
}
