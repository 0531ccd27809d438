package sse

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scanEvents parses a text/event-stream with eventReader, calling emit
// for each event until the stream ends or emit returns false.
func scanEvents(r io.Reader, emit func(Event) bool) error {
	er := newEventReader(r)
	for {
		var ev Event
		ok, err := er.next(&ev)
		if !ok {
			return err
		}
		if !emit(ev) {
			return nil
		}
	}
}

func TestScanEvents_FollowsTheEventStreamFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream string
		want   []Event
	}{
		{"one data line", "data: hi\n\n", []Event{{Data: "hi"}}},
		{"lines joined with newlines", "data: a\ndata:\ndata: b\n\n", []Event{{Data: "a\n\nb"}}},
		{"name and id", "event: delta\nid: 7\ndata: x\n\n", []Event{{ID: "7", Name: "delta", Data: "x"}}},
		{"id carries over, name does not", "event: a\nid: 1\ndata: x\n\ndata: y\n\n", []Event{{ID: "1", Name: "a", Data: "x"}, {ID: "1", Data: "y"}}},
		{"comments and unknown fields skipped", ": keep-alive\nretry: 10\ndata: z\n\n", []Event{{Data: "z"}}},
		{"blank lines alone dispatch nothing", "\n\n\ndata: q\n\n\n", []Event{{Data: "q"}}},
		{"CRLF line ends", "data: w\r\n\r\n", []Event{{Data: "w"}}},
		{"no space after the colon", "data:tight\n\n", []Event{{Data: "tight"}}},
		{"an unfinished event is not dispatched", "data: done\n\ndata: cut", []Event{{Data: "done"}}},
		{"OpenAI's end marker is an ordinary event", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []Event{{Data: `{"a":1}`}, {Data: "[DONE]"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []Event
			require.NoError(t, scanEvents(strings.NewReader(tc.stream), func(e Event) bool {
				got = append(got, e)
				return true
			}))
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestScanEvents_StopsWhenTold(t *testing.T) {
	t.Parallel()
	n := 0
	require.NoError(t, scanEvents(strings.NewReader("data: 1\n\ndata: 2\n\ndata: 3\n\n"), func(Event) bool {
		n++
		return n < 2
	}))
	assert.Equal(t, 2, n)
}

func TestScanEvents_ReadsLinesLongerThanItsBuffer(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100<<10)
	var got []Event
	require.NoError(t, scanEvents(strings.NewReader("id: 1\r\ndata: "+long+"\r\ndata: end\r\n\r\ndata: next\n\n"), func(e Event) bool {
		got = append(got, e)
		return true
	}))
	assert.Equal(t, []Event{{ID: "1", Data: long + "\nend"}, {ID: "1", Data: "next"}}, got)
}

func TestScanEvents_RefusesAnEndlessLine(t *testing.T) {
	t.Parallel()
	endless := io.MultiReader(strings.NewReader("data: "), &repeatReader{b: 'x', left: maxLine + 1})
	err := scanEvents(endless, func(Event) bool { return true })
	require.ErrorIs(t, err, errLineTooLong)
}

// repeatReader yields left copies of b.
type repeatReader struct {
	b    byte
	left int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.left)
	for i := range n {
		p[i] = r.b
	}
	r.left -= n
	return n, nil
}
