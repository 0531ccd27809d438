package metrics

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// JSONOutput writes samples as k6's --out json NDJSON: a
// {"type":"Metric",...} line the first time a metric appears, then one
// {"type":"Point",...} line per sample. Writes are buffered; Flush and
// Close write them through.
// It is safe for concurrent use.
type JSONOutput struct {
	mu      sync.Mutex
	w       *bufio.Writer
	gz      *gzip.Writer // set for .gz files, flushed by Flush
	closers []io.Closer  // owned writers, closed innermost first
	seen    map[*Metric]bool
	th      *ThresholdSet
	buf     []byte
	err     error
	closed  bool
}

// NewJSONOutput writes NDJSON to w. The caller keeps ownership of w: Close
// flushes but does not close it.
func NewJSONOutput(w io.Writer) Output {
	return newJSONOutput(w)
}

func newJSONOutput(w io.Writer) *JSONOutput {
	return &JSONOutput{w: bufio.NewWriterSize(w, 64<<10), seen: map[*Metric]bool{}}
}

// NewJSONFileOutput creates (or truncates) path and writes NDJSON to it,
// gzipped when the name ends in ".gz" as k6 does. Close closes the file.
func NewJSONFileOutput(path string) (Output, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("json output: %w", err)
	}
	if strings.HasSuffix(path, ".gz") {
		gz := gzip.NewWriter(f)
		o := newJSONOutput(gz)
		o.gz = gz
		o.closers = []io.Closer{gz, f}
		return o, nil
	}
	o := newJSONOutput(f)
	o.closers = []io.Closer{f}
	return o, nil
}

// SetThresholds records the thresholds so each metric's "Metric" line lists
// its threshold sources and submetrics, as k6 does.
func (o *JSONOutput) SetThresholds(th *ThresholdSet) {
	o.mu.Lock()
	o.th = th
	o.mu.Unlock()
}

// AddSamples encodes the samples. The first write error is kept and
// returned by Close; later samples are discarded.
func (o *JSONOutput) AddSamples(samples []Sample) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil || o.closed {
		return
	}
	b := o.buf[:0]
	for i := range samples {
		s := &samples[i]
		if s.Metric == nil || math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
			continue
		}
		if !o.seen[s.Metric] {
			o.seen[s.Metric] = true
			b = o.appendMetric(b, s.Metric)
		}
		b = appendPoint(b, s)
		if len(b) > 32<<10 {
			if _, o.err = o.w.Write(b); o.err != nil {
				return
			}
			b = b[:0]
		}
	}
	_, o.err = o.w.Write(b)
	o.buf = b[:0]
}

// Flush writes the buffered lines through to the underlying writer (for
// gzip files, up to a complete deflate block), so that the file can be read
// while the test runs.
func (o *JSONOutput) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil || o.closed {
		return o.err
	}
	if o.err = o.w.Flush(); o.err == nil && o.gz != nil {
		o.err = o.gz.Flush()
	}
	return o.err
}

// Close flushes buffered lines and closes what NewJSONFileOutput opened.
func (o *JSONOutput) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return o.err
	}
	o.closed = true
	errs := []error{o.err}
	if o.err == nil {
		errs = append(errs, o.w.Flush())
	}
	for _, c := range o.closers {
		errs = append(errs, c.Close())
	}
	if err := errors.Join(errs...); err != nil {
		o.err = fmt.Errorf("json output: %w", err)
	}
	return o.err
}

func (o *JSONOutput) appendMetric(b []byte, m *Metric) []byte {
	b = append(b, `{"type":"Metric","data":{"name":`...)
	b = appendJSONString(b, m.Name)
	b = append(b, `,"type":"`...)
	b = append(b, m.Type.String()...)
	b = append(b, `","contains":"`...)
	b = append(b, m.Contains.String()...)
	b = append(b, `","thresholds":[`...)
	var subs []*thresholdEntry
	n := 0
	if o.th != nil {
		for _, e := range o.th.entries {
			if e.metric != m {
				continue
			}
			if e.filter.Len() > 0 {
				subs = append(subs, e)
				continue
			}
			for _, it := range e.items {
				if n > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, it.Source)
				n++
			}
		}
	}
	b = append(b, `],"submetrics":`...)
	if len(subs) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, e := range subs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendJSONString(b, e.key)
			b = append(b, `,"suffix":`...)
			b = appendJSONString(b, e.key[len(m.Name)+1:len(e.key)-1])
			b = append(b, `,"tags":`...)
			b = appendTags(b, e.filter)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `},"metric":`...)
	b = appendJSONString(b, m.Name)
	return append(b, "}\n"...)
}

func appendPoint(b []byte, s *Sample) []byte {
	b = append(b, `{"type":"Point","data":{"time":"`...)
	b = s.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","value":`...)
	b = appendJSONFloat(b, s.Value)
	b = append(b, `,"tags":`...)
	b = appendTags(b, s.Tags)
	b = append(b, `},"metric":`...)
	b = appendJSONString(b, s.Metric.Name)
	return append(b, "}\n"...)
}

func appendTags(b []byte, t Tags) []byte {
	b = append(b, '{')
	for i, p := range t.pairs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, p.key)
		b = append(b, ':')
		b = appendJSONString(b, p.value)
	}
	return append(b, '}')
}

// appendJSONFloat formats like encoding/json: plain decimals for ordinary
// magnitudes, exponent form for very small or very large ones.
func appendJSONFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
