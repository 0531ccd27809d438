package containers

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeImages is an engine whose images, pulls and builds are scripted.
type fakeImages struct {
	present  map[string]bool
	pullable map[string]bool
	inspect  error

	pulled, built []string
}

func (f *fakeImages) hasImage(_ context.Context, ref string) (bool, error) {
	if f.inspect != nil {
		return false, f.inspect
	}
	return f.present[ref], nil
}

func (f *fakeImages) pull(ctx context.Context, ref string) error {
	f.pulled = append(f.pulled, ref)
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("pull without a deadline")
	}
	if !f.pullable[ref] {
		return errors.New("registry unreachable")
	}
	return nil
}

func (f *fakeImages) build(_ context.Context, spec ImageSpec) error {
	f.built = append(f.built, spec.Tag)
	return nil
}

func TestResolveImage_Strategies(t *testing.T) {
	const official, local = "nats:2.15.2", "mocker-local/nats:v2.15.2"
	img := serverImage{official: official, local: ImageSpec{Tag: local, Package: "x"}}

	tests := []struct {
		name       string
		strategy   ImageStrategy
		present    []string
		pullable   bool
		wantRef    string
		wantSource imageSource
		wantPulled bool
		wantBuilt  bool
		wantErr    string
	}{
		{name: "auto prefers a cached local image", strategy: ImagesAuto, present: []string{local, official},
			wantRef: local, wantSource: sourceLocalCached},
		{name: "auto uses a cached official image", strategy: ImagesAuto, present: []string{official},
			wantRef: official, wantSource: sourceOfficialCached},
		{name: "auto pulls the official image", strategy: ImagesAuto, pullable: true,
			wantRef: official, wantSource: sourceOfficialPulled, wantPulled: true},
		{name: "auto builds when the pull fails", strategy: ImagesAuto,
			wantRef: local, wantSource: sourceLocalBuilt, wantPulled: true, wantBuilt: true},
		{name: "local uses the cached image", strategy: ImagesLocal, present: []string{local, official},
			wantRef: local, wantSource: sourceLocalCached},
		{name: "local builds and never pulls", strategy: ImagesLocal, present: []string{official}, pullable: true,
			wantRef: local, wantSource: sourceLocalBuilt, wantBuilt: true},
		{name: "official ignores a local image", strategy: ImagesOfficial, present: []string{local, official},
			wantRef: official, wantSource: sourceOfficialCached},
		{name: "official pulls", strategy: ImagesOfficial, pullable: true,
			wantRef: official, wantSource: sourceOfficialPulled, wantPulled: true},
		{name: "official never falls back to building", strategy: ImagesOfficial, present: []string{local},
			wantPulled: true, wantErr: "MOCKER_IMAGES=official"},
		{name: "unknown strategy", strategy: "nightly", wantErr: `unknown image strategy "nightly"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeImages{present: map[string]bool{}, pullable: map[string]bool{official: tt.pullable}}
			for _, p := range tt.present {
				f.present[p] = true
			}
			ref, source, err := resolveImage(context.Background(), tt.strategy, img, f)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.wantRef, ref)
				assert.Equal(t, tt.wantSource, source)
			}
			assert.Equal(t, tt.wantPulled, len(f.pulled) > 0, "pulled %v", f.pulled)
			assert.Equal(t, tt.wantBuilt, len(f.built) > 0, "built %v", f.built)
		})
	}
}

func TestResolveImage_InspectErrorIsReported(t *testing.T) {
	f := &fakeImages{inspect: errors.New("engine gone")}
	img := serverImage{official: "o", local: ImageSpec{Tag: "l", Package: "x"}}
	for _, s := range []ImageStrategy{ImagesAuto, ImagesLocal, ImagesOfficial} {
		_, _, err := resolveImage(context.Background(), s, img, f)
		require.ErrorContains(t, err, "engine gone", "strategy %s", s)
	}
	assert.Empty(t, f.built, "an engine error must not trigger a build")
}

func TestParseImageStrategy(t *testing.T) {
	tests := []struct {
		in      string
		want    ImageStrategy
		wantErr bool
	}{
		{"", ImagesAuto, false},
		{"auto", ImagesAuto, false},
		{" Official ", ImagesOfficial, false},
		{"LOCAL", ImagesLocal, false},
		{"registry", "", true},
	}
	for _, tt := range tests {
		got, err := ParseImageStrategy(tt.in)
		if tt.wantErr {
			require.ErrorContains(t, err, EnvImages, "input %q", tt.in)
			continue
		}
		require.NoError(t, err, "input %q", tt.in)
		assert.Equal(t, tt.want, got, "input %q", tt.in)
	}
}

func TestImageStrategyFromEnv(t *testing.T) {
	t.Setenv(EnvImages, "local")
	s, err := ImageStrategyFromEnv()
	require.NoError(t, err)
	assert.Equal(t, ImagesLocal, s)
}

func TestAbandoned(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const me = "builder"
	tests := []struct {
		name    string
		labels  map[string]string
		age     time.Duration
		removes bool
	}{
		{"own session is kept", map[string]string{LabelSession: session, LabelHost: me, LabelPID: "1"}, 0, false},
		{"live owner on this host is kept", map[string]string{LabelSession: "other", LabelHost: me, LabelPID: itoa(osPID())}, 3 * staleAfter, false},
		{"dead owner on this host is removed", map[string]string{LabelSession: "other", LabelHost: me, LabelPID: "0"}, 0, true},
		{"young container of another host is kept", map[string]string{LabelSession: "other", LabelHost: "elsewhere", LabelPID: "1"}, time.Minute, false},
		{"old container of another host is removed", map[string]string{LabelSession: "other", LabelHost: "elsewhere", LabelPID: "1"}, staleAfter + time.Minute, true},
		{"unlabelled old container is removed", map[string]string{}, staleAfter + time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.removes, abandoned(tt.labels, now.Add(-tt.age), me, now))
		})
	}
}

func TestSplitRef(t *testing.T) {
	tests := []struct{ ref, repo, tag string }{
		{"mocker-local/etcd:v3.7.3", "mocker-local/etcd", "v3.7.3"},
		{"nats", "nats", "latest"},
		{"registry.local:5000/mocker", "registry.local:5000/mocker", "latest"},
		{"registry.local:5000/mocker:dev", "registry.local:5000/mocker", "dev"},
	}
	for _, tt := range tests {
		repo, tag := splitRef(tt.ref)
		assert.Equal(t, tt.repo, repo, tt.ref)
		assert.Equal(t, tt.tag, tag, tt.ref)
	}
}

func TestImageSpec_DefaultBinaryPath(t *testing.T) {
	tests := []struct{ pkg, want string }{
		{"./cmd/mocker", "/usr/local/bin/mocker"},
		{"github.com/nats-io/nats-server/v2", "/usr/local/bin/nats-server"},
		{"github.com/kvstrand/mocker/containers/images/etcd", "/usr/local/bin/etcd"},
		{".", "/usr/local/bin/app"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ImageSpec{Package: tt.pkg}.binaryPath(), tt.pkg)
	}
}

func TestTail_KeepsLastLines(t *testing.T) {
	assert.Equal(t, "c\nd", tail("a\nb\nc\nd\n", 2))
	assert.Equal(t, "only", tail("only", 5))
}

func itoa(i int) string { return strconv.Itoa(i) }

func osPID() int { return os.Getpid() }

func TestDockerVerdict_CIMakesAMissingEngineFatal(t *testing.T) {
	cause := errors.New("dial unix /var/run/docker.sock: connect: no such file or directory")
	tests := []struct {
		ci        string
		wantFatal bool
		wantHint  string
	}{
		{"true", true, "CI=true makes a missing engine a failure"},
		{"", false, "set CI=true to make this a failure"},
		{"false", false, "set CI=true to make this a failure"},
	}
	for _, tt := range tests {
		fatal, msg := dockerVerdict(cause, tt.ci)
		assert.Equal(t, tt.wantFatal, fatal, "CI=%q", tt.ci)
		assert.Contains(t, msg, "docker not available: "+cause.Error(), "CI=%q", tt.ci)
		assert.Contains(t, msg, tt.wantHint, "CI=%q", tt.ci)
	}
}
