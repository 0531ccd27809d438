package main

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set at link time (-ldflags "-X main.version=..."); otherwise the
// build info recorded in the binary says which build it is.
var version = ""

// buildInfo says which code a binary was built from, for bug reports:
// `mocker version` prints it and the `mocker run` banner carries it.
type buildInfo struct {
	// Version is the link-time version, else the module version the go
	// command recorded: a release ("v1.2.3") for `go install …@v1.2.3`,
	// a pseudo-version for a build in a checkout, "(devel)" when it knew
	// none.
	Version string
	// Revision, Time and Modified are the checkout's commit, its commit
	// time (RFC 3339) and whether the tree had changes, when the go
	// command stamped them (a build in a git checkout, -buildvcs not
	// false); Revision is empty otherwise.
	Revision, Time string
	Modified       bool
	// Go is the toolchain that built the binary, Platform its GOOS/GOARCH.
	Go, Platform string
}

// readBuildInfo reads the running binary's build info.
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return newBuildInfo(bi, version)
}

// newBuildInfo builds buildInfo from what the go command recorded (bi may
// be nil: a binary built without module support) and the link-time
// version.
func newBuildInfo(bi *debug.BuildInfo, linked string) buildInfo {
	b := buildInfo{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.Main.Version != "" {
			b.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			b.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if linked != "" {
		b.Version = linked
	}
	return b
}

// pseudoVersion matches the versions the go command makes up for a commit
// that no tag names (v0.0.0-20260101120000-abcdef123456, +dirty when the
// tree was modified): the revision says the same, better.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}(\+dirty)?$`)

// released reports whether Version names a release rather than a commit.
func (b buildInfo) released() bool {
	return b.Version != "(devel)" && !pseudoVersion.MatchString(b.Version)
}

// Line is the build in one line, for the `mocker run` banner: the release,
// or the revision (12 digits), its time and whether the tree was modified,
// or both; then the Go version.
func (b buildInfo) Line() string {
	var parts []string
	if b.released() || b.Revision == "" {
		parts = append(parts, b.Version)
	}
	if b.Revision != "" {
		rev := "revision " + shortRevision(b.Revision)
		var about []string
		if b.Time != "" {
			about = append(about, b.Time)
		}
		if b.Modified {
			about = append(about, "modified")
		}
		if len(about) > 0 {
			rev += " (" + strings.Join(about, ", ") + ")"
		}
		parts = append(parts, rev)
	}
	return strings.Join(parts, " ") + ", " + b.Go
}

// Text is what `mocker version` prints: the version, then the revision,
// its time and whether the tree was modified when known, then the Go
// version and platform, one per line.
func (b buildInfo) Text() string {
	var s strings.Builder
	fmt.Fprintf(&s, "mocker %s\n", b.Version)
	if b.Revision != "" {
		fmt.Fprintf(&s, "  revision  %s\n", b.Revision)
		if b.Time != "" {
			fmt.Fprintf(&s, "  time      %s\n", b.Time)
		}
		fmt.Fprintf(&s, "  modified  %t\n", b.Modified)
	} else if !b.released() {
		s.WriteString("  revision  unknown: built outside a git checkout, or with -buildvcs=false\n")
	}
	fmt.Fprintf(&s, "  go        %s %s\n", b.Go, b.Platform)
	return s.String()
}

// shortRevision is a revision's first 12 digits, as the go command's
// pseudo-versions and most hosts show a commit.
func shortRevision(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
