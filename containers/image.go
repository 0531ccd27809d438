package containers

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// ImageStrategy says where server images come from.
type ImageStrategy string

// The strategies MOCKER_IMAGES accepts.
const (
	// ImagesAuto uses a locally built image if one is present, then an
	// official image if present or pullable within a short timeout, and
	// builds the local image as a last resort. The default.
	ImagesAuto ImageStrategy = "auto"
	// ImagesOfficial uses only the official image, pulling it if needed.
	ImagesOfficial ImageStrategy = "official"
	// ImagesLocal uses only the image built from the pinned Go modules,
	// building it if needed.
	ImagesLocal ImageStrategy = "local"
)

// EnvImages selects the [ImageStrategy]; empty means auto.
const EnvImages = "MOCKER_IMAGES"

// Environment variables that replace the official image references, for
// users with a registry mirror. The defaults track the pinned module versions.
const (
	EnvEtcdImage = "MOCKER_ETCD_IMAGE"
	EnvNATSImage = "MOCKER_NATS_IMAGE"
)

// Timeouts for pulling an official image: short when a local build can take
// over, generous when the user asked for the official image only.
const (
	autoPullTimeout     = 20 * time.Second
	officialPullTimeout = 10 * time.Minute
)

// ImageStrategyFromEnv reads MOCKER_IMAGES.
func ImageStrategyFromEnv() (ImageStrategy, error) {
	return ParseImageStrategy(os.Getenv(EnvImages))
}

// ParseImageStrategy validates a strategy name; empty means auto.
func ParseImageStrategy(s string) (ImageStrategy, error) {
	switch ImageStrategy(strings.ToLower(strings.TrimSpace(s))) {
	case "", ImagesAuto:
		return ImagesAuto, nil
	case ImagesOfficial:
		return ImagesOfficial, nil
	case ImagesLocal:
		return ImagesLocal, nil
	}
	return "", fmt.Errorf("%s=%q is not a valid image strategy: use auto, official or local", EnvImages, s)
}

// ImageSpec describes a container image holding one statically linked Go
// program from this module (or from a module it requires), on scratch.
type ImageSpec struct {
	// Tag is the image reference to create, e.g. "mocker-local/mocker:dev".
	Tag string
	// Package is what go build builds: an import path
	// ("github.com/nats-io/nats-server/v2") or a directory relative to the
	// module root ("./cmd/mocker").
	Package string
	// BinaryPath is where the program lands in the image; default
	// /usr/local/bin/<last element of Package>.
	BinaryPath string
	// Entrypoint defaults to [BinaryPath].
	Entrypoint []string
	// Cmd is the image's default arguments.
	Cmd []string
	// ExposedPorts are recorded in the image, e.g. "2379/tcp".
	ExposedPorts []string
	// Labels are added to the image besides org.kvstrand.mocker=1.
	Labels map[string]string
	// Reuse skips the build when an image with Tag already exists. Use it when
	// the tag names the content (a module version); leave it off for images of
	// code under development, whose rebuild is cheap thanks to Go's build
	// cache and Docker's layer cache.
	Reuse bool
	// ModuleDir is the directory go build runs in; default the module root
	// found from the working directory (go env GOMOD).
	ModuleDir string
}

func (s ImageSpec) binaryPath() string {
	if s.BinaryPath != "" {
		return s.BinaryPath
	}
	base := strings.TrimSuffix(s.Package, "/")
	base = base[strings.LastIndex(base, "/")+1:]
	if isMajorVersionSuffix(base) {
		trimmed := strings.TrimSuffix(strings.TrimSuffix(s.Package, "/"), "/"+base)
		base = trimmed[strings.LastIndex(trimmed, "/")+1:]
	}
	if base == "" || base == "." {
		base = "app"
	}
	return "/usr/local/bin/" + base
}

// isMajorVersionSuffix tells "v2" in ".../nats-server/v2" apart from a name.
func isMajorVersionSuffix(s string) bool {
	if len(s) < 2 || s[0] != 'v' {
		return false
	}
	for _, r := range s[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func (s ImageSpec) validate() error {
	if s.Tag == "" {
		return errors.New("image spec: Tag is empty; name the image to create, e.g. mocker-local/mocker:dev")
	}
	if s.Package == "" {
		return fmt.Errorf("image spec %s: Package is empty; give an import path or ./dir", s.Tag)
	}
	return nil
}

// WorkerImageRepo is the repository of the mocker worker image; its tag
// is the first 12 hex digits of the SHA-256 of the static binary inside, so
// the same code is one image and a rebuild of unchanged code is a no-op.
const WorkerImageRepo = "mocker-local/mocker"

// BuildWorkerImage compiles the mocker binary (./cmd/mocker) as a static
// Linux binary and returns the reference of an image holding it,
// mocker-local/mocker:<content hash>. The compile runs each call (Go's build
// cache makes an unchanged one take seconds); the image is built only when
// no image of that content exists yet.
func BuildWorkerImage(ctx context.Context) (string, error) {
	return buildMockerImage(ctx, WorkerImageRepo, ImageSpec{})
}

// buildMockerImage builds an image of the mocker binary under repo, tagged
// with the binary's content hash; spec gives the rest (Cmd, ExposedPorts).
func buildMockerImage(ctx context.Context, repo string, spec ImageSpec) (string, error) {
	e, err := getEngine(ctx)
	if err != nil {
		return "", err
	}
	spec.Package, spec.BinaryPath, spec.Reuse = "./cmd/mocker", "/usr/local/bin/mocker", true
	bin, err := goBuild(ctx, spec, e.goarch)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(bin)
	spec.Tag = repo + ":" + hex.EncodeToString(sum[:6])
	return e.buildImage(ctx, spec, func() ([]byte, error) { return bin, nil })
}

// buildLocks serialises builds of one tag within this process; lockFile does
// the same across processes.
var buildLocks sync.Map // tag -> *sync.Mutex

// BuildGoImage compiles spec.Package with CGO_ENABLED=0 for the Docker
// engine's architecture and builds a scratch image holding it, tagged
// spec.Tag. It returns the tag. The image is labelled org.kvstrand.mocker=1
// and is not removed when containers using it terminate.
func BuildGoImage(ctx context.Context, spec ImageSpec) (string, error) {
	if err := spec.validate(); err != nil {
		return "", err
	}
	e, err := getEngine(ctx)
	if err != nil {
		return "", err
	}
	return e.buildGoImage(ctx, spec)
}

func (e *engine) buildGoImage(ctx context.Context, spec ImageSpec) (string, error) {
	return e.buildImage(ctx, spec, func() ([]byte, error) { return goBuild(ctx, spec, e.goarch) })
}

// buildImage builds spec's image around the binary compile returns, which
// runs only when the image is to be built.
func (e *engine) buildImage(ctx context.Context, spec ImageSpec, compile func() ([]byte, error)) (string, error) {
	mu, _ := buildLocks.LoadOrStore(spec.Tag, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	lockPath := filepath.Join(os.TempDir(), "mocker-image-"+sanitize(spec.Tag)+".lock")
	unlock, err := lockFile(ctx, lockPath)
	if err != nil {
		return "", err
	}
	defer unlock()

	if spec.Reuse {
		ok, err := e.hasImage(ctx, spec.Tag)
		if err != nil {
			return "", err
		}
		if ok {
			return spec.Tag, nil
		}
	}

	start := time.Now()
	slog.Info("containers: building image", "tag", spec.Tag, "package", spec.Package, "goarch", e.goarch)
	bin, err := compile()
	if err != nil {
		return "", err
	}
	compiled := time.Since(start)

	buildCtx, err := imageContext(spec, bin)
	if err != nil {
		return "", err
	}
	repo, tag := splitRef(spec.Tag)
	labels := ownerLabels()
	delete(labels, LabelSession) // an image outlives its session by design
	delete(labels, LabelPID)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	var buildLog bytes.Buffer
	req := testcontainers.ContainerRequest{FromDockerfile: testcontainers.FromDockerfile{
		ContextArchive: bytes.NewReader(buildCtx),
		Repo:           repo,
		Tag:            tag,
		KeepImage:      true,
		BuildLogWriter: &buildLog,
		BuildOptionsModifier: func(o *client.ImageBuildOptions) {
			o.Labels = labels
		},
	}}
	provider, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(tcLogger{}))
	if err != nil {
		return "", fmt.Errorf("build image %s: docker provider: %w", spec.Tag, err)
	}
	defer provider.Close()
	if _, err := provider.BuildImage(ctx, &req); err != nil {
		return "", fmt.Errorf("build image %s: %w\nbuild output:\n%s", spec.Tag, err, tail(buildLog.String(), 30))
	}
	slog.Info("containers: built image", "tag", spec.Tag,
		"compile", compiled.Round(time.Millisecond), "total", time.Since(start).Round(time.Millisecond))
	return spec.Tag, nil
}

// goBuild compiles the program and returns the binary's bytes.
func goBuild(ctx context.Context, spec ImageSpec, goarch string) ([]byte, error) {
	dir := spec.ModuleDir
	if dir == "" {
		var err error
		if dir, err = moduleRoot(ctx); err != nil {
			return nil, err
		}
	}
	out, err := os.MkdirTemp("", "mocker-image-build-")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", spec.Package, err)
	}
	defer os.RemoveAll(out)
	binPath := filepath.Join(out, "app")

	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", binPath, spec.Package)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s in %s for linux/%s: %w\n%s", spec.Package, dir, goarch, err, tail(string(msg), 40))
	}
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("read built binary of %s: %w", spec.Package, err)
	}
	return bin, nil
}

// moduleRoot finds the directory of the go.mod governing the working
// directory, which is where go build must run to use this repository's
// pinned module versions.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locate go.mod with 'go env GOMOD' (is the go toolchain on PATH?): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("no go.mod governs the working directory: run from inside the mocker module or set ImageSpec.ModuleDir")
	}
	return filepath.Dir(gomod), nil
}

// moduleVersion asks the go toolchain which version of a module the build
// list selects, so image tags follow go.mod without a second source of truth.
func moduleVersion(ctx context.Context, module string) (string, error) {
	dir, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", module)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("go list -m %s: no version (is the module required in go.mod?)", module)
	}
	return v, nil
}

// imageContext is the build context: a Dockerfile, the binary and an empty
// /tmp, which scratch lacks and Go programs expect.
func imageContext(spec ImageSpec, bin []byte) ([]byte, error) {
	binPath := spec.binaryPath()
	entry := spec.Entrypoint
	if len(entry) == 0 {
		entry = []string{binPath}
	}
	var df strings.Builder
	df.WriteString("FROM scratch\n")
	df.WriteString("COPY app " + binPath + "\n")
	df.WriteString("COPY tmp /tmp\n")
	for _, p := range spec.ExposedPorts {
		df.WriteString("EXPOSE " + p + "\n")
	}
	df.WriteString("ENTRYPOINT " + jsonArray(entry) + "\n")
	if len(spec.Cmd) > 0 {
		df.WriteString("CMD " + jsonArray(spec.Cmd) + "\n")
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	files := []struct {
		name string
		mode int64
		body []byte
	}{
		{"Dockerfile", 0o644, []byte(df.String())},
		{"app", 0o755, bin},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: now}); err != nil {
			return nil, fmt.Errorf("image context for %s: %w", spec.Tag, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("image context for %s: %w", spec.Tag, err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: now}); err != nil {
		return nil, fmt.Errorf("image context for %s: %w", spec.Tag, err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image context for %s: %w", spec.Tag, err)
	}
	return buf.Bytes(), nil
}

func jsonArray(ss []string) string {
	quoted := make([]string, len(ss))
	for i, s := range ss {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// splitRef splits "repo/name:tag" into repository and tag; a ':' before the
// last '/' belongs to a registry port, not a tag.
func splitRef(ref string) (repo, tag string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || i < strings.LastIndex(ref, "/") {
		return ref, "latest"
	}
	return ref[:i], ref[i+1:]
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}

// hasImage reports whether the engine holds ref.
func (e *engine) hasImage(ctx context.Context, ref string) (bool, error) {
	_, err := e.cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("inspect image %s: %w", ref, err)
}

// pull fetches ref from its registry and waits for the pull to finish.
func (e *engine) pull(ctx context.Context, ref string) error {
	resp, err := e.cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	defer resp.Close()
	if err := resp.Wait(ctx); err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	return nil
}

// imageSource records how an image was obtained, for logs and tests.
type imageSource string

const (
	sourceLocalCached    imageSource = "local-cached"
	sourceLocalBuilt     imageSource = "local-built"
	sourceOfficialCached imageSource = "official-cached"
	sourceOfficialPulled imageSource = "official-pulled"
)

// imageBackend is what choosing an image needs from the engine; the unit
// tests of the strategy substitute a fake.
type imageBackend interface {
	hasImage(ctx context.Context, ref string) (bool, error)
	pull(ctx context.Context, ref string) error
	build(ctx context.Context, spec ImageSpec) error
}

// serverImage names the two forms a server image can take.
type serverImage struct {
	official string
	local    ImageSpec
}

// resolveImage applies a strategy: which image to run, obtaining it if need be.
func resolveImage(ctx context.Context, strategy ImageStrategy, img serverImage, b imageBackend) (string, imageSource, error) {
	buildLocal := func() (string, imageSource, error) {
		if err := b.build(ctx, img.local); err != nil {
			return "", "", err
		}
		return img.local.Tag, sourceLocalBuilt, nil
	}
	switch strategy {
	case ImagesLocal:
		ok, err := b.hasImage(ctx, img.local.Tag)
		if err != nil {
			return "", "", err
		}
		if ok {
			return img.local.Tag, sourceLocalCached, nil
		}
		return buildLocal()

	case ImagesOfficial:
		ok, err := b.hasImage(ctx, img.official)
		if err != nil {
			return "", "", err
		}
		if ok {
			return img.official, sourceOfficialCached, nil
		}
		pctx, cancel := context.WithTimeout(ctx, officialPullTimeout)
		defer cancel()
		if err := b.pull(pctx, img.official); err != nil {
			return "", "", fmt.Errorf("%s=official but the image cannot be had: %w (use %s=local or auto to build it from the Go modules)",
				EnvImages, err, EnvImages)
		}
		return img.official, sourceOfficialPulled, nil

	case ImagesAuto, "":
		if ok, err := b.hasImage(ctx, img.local.Tag); err != nil {
			return "", "", err
		} else if ok {
			return img.local.Tag, sourceLocalCached, nil
		}
		if ok, err := b.hasImage(ctx, img.official); err != nil {
			return "", "", err
		} else if ok {
			return img.official, sourceOfficialCached, nil
		}
		pctx, cancel := context.WithTimeout(ctx, autoPullTimeout)
		err := b.pull(pctx, img.official)
		cancel()
		if err == nil {
			return img.official, sourceOfficialPulled, nil
		}
		slog.Info("containers: official image unavailable, building locally", "image", img.official, "err", err, "tag", img.local.Tag)
		return buildLocal()
	}
	return "", "", fmt.Errorf("unknown image strategy %q: use auto, official or local", strategy)
}

// engineBackend adapts the engine to imageBackend.
type engineBackend struct{ e *engine }

func (b engineBackend) hasImage(ctx context.Context, ref string) (bool, error) {
	return b.e.hasImage(ctx, ref)
}

func (b engineBackend) pull(ctx context.Context, ref string) error { return b.e.pull(ctx, ref) }

func (b engineBackend) build(ctx context.Context, spec ImageSpec) error {
	_, err := b.e.buildGoImage(ctx, spec)
	return err
}

// tail keeps the last n lines of s, and at most 8 KiB of them.
func tail(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	const maxBytes = 8 << 10
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return out
}

var versions sync.Map // module path -> version

// lookupVersion is moduleVersion with a cache and a fallback: without a go
// toolchain the official image can still be named.
func lookupVersion(ctx context.Context, module, fallback string) string {
	if v, ok := versions.Load(module); ok {
		return v.(string)
	}
	v, err := moduleVersion(ctx, module)
	if err != nil {
		slog.Debug("containers: module version unknown, using the default", "module", module, "default", fallback, "err", err)
		v = fallback
	}
	versions.Store(module, v)
	return v
}

func envOr(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}

// PrepareImages makes sure the etcd and NATS images the strategy in
// MOCKER_IMAGES selects are on the engine, building or pulling them in
// parallel, and returns their references (etcd first). CI runs it before the
// tests so that a cold image build is paid once, outside any test timeout.
func PrepareImages(ctx context.Context) (etcdRef, natsRef string, err error) {
	strategy, err := ImageStrategyFromEnv()
	if err != nil {
		return "", "", err
	}
	e, err := getEngine(ctx)
	if err != nil {
		return "", "", err
	}
	var (
		wg               sync.WaitGroup
		etcdErr, natsErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		etcdRef, _, etcdErr = resolveImage(ctx, strategy, etcdSpec(ctx).image, engineBackend{e})
	}()
	go func() {
		defer wg.Done()
		natsRef, _, natsErr = resolveImage(ctx, strategy, natsSpec(ctx).image, engineBackend{e})
	}()
	wg.Wait()
	if etcdErr != nil {
		etcdErr = fmt.Errorf("etcd image: %w", etcdErr)
	}
	if natsErr != nil {
		natsErr = fmt.Errorf("nats image: %w", natsErr)
	}
	return etcdRef, natsRef, errors.Join(etcdErr, natsErr)
}
