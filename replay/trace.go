package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/kvstrand/mocker/cluster"
)

// MaxLineBytes bounds one trace line (1 MiB): a request's row is a few
// hundred bytes, and a prompt of cluster.MaxPromptTokens in 512-token hash
// blocks lists 8,192 ids. A longer line is an error, found without
// reading more of it than the bound.
const MaxLineBytes = 1 << 20

// Record is one row of a trace: a request, or a turn of a session.
type Record struct {
	// Line is the row's line in the file, from 1.
	Line int
	// TimestampMs is when the request arrives, in ms (Mooncake's
	// timestamp); HasTimestamp says the row gave one. A session's later
	// turns may go without.
	TimestampMs  float64
	HasTimestamp bool
	// InputLength and OutputLength are the prompt and output lengths in
	// tokens.
	InputLength, OutputLength int
	// HashIDs name the prompt's blocks of the trace's block size: equal
	// ids are equal blocks. The slice is the reader's, valid until the
	// next call to Next.
	HashIDs []uint64
	// Session names the session the row is a turn of; "" for a request
	// on its own.
	Session string
	// DelayMs is the wait between the end of the session's turn before
	// and this one (delay or delay_ms); HasDelay says the row gave one.
	DelayMs  float64
	HasDelay bool
}

// Reader reads a trace one record at a time, in bounded memory: Mooncake
// JSONL (with optional session_id and delay), or CSV with a header row.
// Gzip input is recognised by its magic bytes and read through. Blank
// lines are skipped.
type Reader struct {
	br   *bufio.Reader
	gz   *gzip.Reader
	line int
	buf  []byte // a line longer than br's buffer, gathered
	rec  Record
	row  jsonRow
	// noQuick has every row decoded by encoding/json (tests compare).
	noQuick bool
	// quick holds the numbers of a row quickRow decoded, which row points
	// at.
	quick struct {
		ts      float64
		in, out int64
	}
	csv  bool
	cols []string // a CSV trace's header
}

// ParseError is a trace row the reader refused: Line and Field say where.
type ParseError struct {
	Line  int
	Field string // "" when the row as a whole is at fault
	Err   error
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("line %d: %s: %v", e.Line, e.Field, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// ErrEmpty is the error of a trace with no request in it.
var ErrEmpty = errors.New("the trace holds no request")

// NewReader reads a trace from r: gzip when it starts with gzip's magic
// bytes, JSONL when its first non-blank byte is '{', CSV otherwise.
func NewReader(r io.Reader) (*Reader, error) {
	t := &Reader{br: bufio.NewReaderSize(r, 64<<10)}
	if magic, _ := t.br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(t.br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		t.gz = gz
		t.br = bufio.NewReaderSize(gz, 64<<10)
	}
	for {
		b, err := t.br.Peek(1)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, ErrEmpty
			}
			return nil, err
		}
		if b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n' {
			if b[0] == '\n' {
				t.line++
			}
			_, _ = t.br.ReadByte()
			continue
		}
		t.csv = b[0] != '{'
		return t, nil
	}
}

// readLine returns the next line without its end, or io.EOF.
func (t *Reader) readLine() ([]byte, error) {
	t.line++
	b, err := t.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		t.buf = append(t.buf[:0], b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(t.buf) > MaxLineBytes {
				return nil, &ParseError{Line: t.line, Err: fmt.Errorf("longer than %d bytes: a row holds one request; is this a trace?", MaxLineBytes)}
			}
			b, err = t.br.ReadSlice('\n')
			t.buf = append(t.buf, b...)
		}
		b = t.buf
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("line %d: %w", t.line, err)
	}
	if len(b) > MaxLineBytes {
		return nil, &ParseError{Line: t.line, Err: fmt.Errorf("longer than %d bytes: a row holds one request; is this a trace?", MaxLineBytes)}
	}
	if len(b) == 0 && errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	return bytes.TrimRight(b, "\r\n"), nil
}

// Next returns the next record, io.EOF after the last, or an error naming
// the line and field at fault. The record is the reader's, valid until the
// next call.
func (t *Reader) Next() (*Record, error) {
	for {
		b, err := t.readLine()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if t.csv && t.cols == nil {
			if err := t.header(b); err != nil {
				return nil, err
			}
			continue
		}
		t.rec = Record{Line: t.line, HashIDs: t.rec.HashIDs[:0]}
		if t.csv {
			err = t.csvRow(b)
		} else {
			err = t.jsonRow(b)
		}
		if err != nil {
			return nil, err
		}
		if err := t.rec.check(); err != nil {
			return nil, err
		}
		return &t.rec, nil
	}
}

// Close releases the gzip stream, if any; the underlying reader is the
// caller's.
func (t *Reader) Close() error {
	if t.gz != nil {
		return t.gz.Close()
	}
	return nil
}

// jsonRow is a JSONL row's known keys; others are ignored, as traces carry
// fields of their own.
type jsonRow struct {
	Timestamp    *float64        `json:"timestamp"`
	CreatedTime  *float64        `json:"created_time"`
	InputLength  *int64          `json:"input_length"`
	OutputLength *int64          `json:"output_length"`
	HashIDs      []int64         `json:"hash_ids"`
	SessionID    json.RawMessage `json:"session_id"`
	Delay        *float64        `json:"delay"`
	DelayMs      *float64        `json:"delay_ms"`
}

func (t *Reader) jsonRow(b []byte) error {
	ids := t.row.HashIDs[:0]
	t.row = jsonRow{HashIDs: ids}
	if !t.noQuick && t.quickRow(b) {
		return t.rowRecord()
	}
	t.row = jsonRow{HashIDs: ids}
	if err := json.Unmarshal(b, &t.row); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &ParseError{Line: t.line, Field: te.Field, Err: fmt.Errorf("want %s, got a JSON %s", want(te.Type.Kind().String()), te.Value)}
		}
		return &ParseError{Line: t.line, Err: fmt.Errorf("not a JSON object: %w", err)}
	}
	return t.rowRecord()
}

// rowRecord fills the record from the row decoded.
func (t *Reader) rowRecord() error {
	r, row := &t.rec, &t.row
	switch {
	case row.Timestamp != nil:
		r.TimestampMs, r.HasTimestamp = *row.Timestamp, true
	case row.CreatedTime != nil:
		r.TimestampMs, r.HasTimestamp = *row.CreatedTime, true
	}
	if row.InputLength == nil {
		return &ParseError{Line: t.line, Field: "input_length", Err: errors.New("missing")}
	}
	if row.OutputLength == nil {
		return &ParseError{Line: t.line, Field: "output_length", Err: errors.New("missing")}
	}
	var err error
	if r.InputLength, err = length(t.line, "input_length", *row.InputLength, cluster.MaxPromptTokens); err != nil {
		return err
	}
	if r.OutputLength, err = length(t.line, "output_length", *row.OutputLength, cluster.MaxRequestMaxTokens); err != nil {
		return err
	}
	for i, id := range row.HashIDs {
		if id < 0 {
			return &ParseError{Line: t.line, Field: fmt.Sprintf("hash_ids[%d]", i), Err: fmt.Errorf("want an id ≥ 0, got %d", id)}
		}
		r.HashIDs = append(r.HashIDs, uint64(id))
	}
	if len(row.SessionID) > 0 && string(row.SessionID) != "null" {
		var s string
		if row.SessionID[0] == '"' {
			if err := json.Unmarshal(row.SessionID, &s); err != nil {
				return &ParseError{Line: t.line, Field: "session_id", Err: err}
			}
		} else {
			s = string(row.SessionID)
		}
		r.Session = s
	}
	switch {
	case row.Delay != nil:
		r.DelayMs, r.HasDelay = *row.Delay, true
	case row.DelayMs != nil:
		r.DelayMs, r.HasDelay = *row.DelayMs, true
	}
	return nil
}

// want names a JSON type by the Go kind a field decodes into.
func want(kind string) string {
	switch kind {
	case "float64", "int64":
		return "a number"
	case "slice":
		return "an array of ids"
	default:
		return kind
	}
}

func length(line int, field string, n int64, hi int) (int, error) {
	if n < 1 || n > int64(hi) {
		return 0, &ParseError{Line: line, Field: field, Err: fmt.Errorf("want a number of tokens in [1, %d], got %d", hi, n)}
	}
	return int(n), nil
}

// check holds what every record must satisfy, whatever its encoding.
func (r *Record) check() error {
	if r.HasTimestamp && (!(r.TimestampMs >= 0) || r.TimestampMs > 1e15) {
		return &ParseError{Line: r.Line, Field: "timestamp", Err: fmt.Errorf("want a number of ms ≥ 0, got %v", r.TimestampMs)}
	}
	if r.HasDelay && (!(r.DelayMs >= 0) || r.DelayMs > 1e12) {
		return &ParseError{Line: r.Line, Field: "delay", Err: fmt.Errorf("want a number of ms ≥ 0, got %v", r.DelayMs)}
	}
	if r.Session == "" && !r.HasTimestamp {
		return &ParseError{Line: r.Line, Field: "timestamp", Err: errors.New("missing: a request outside a session needs its arrival time")}
	}
	return nil
}

// csvColumns are the columns a CSV trace may have; others are ignored.
var csvColumns = map[string]string{
	"timestamp": "timestamp", "arrival_ms": "timestamp", "created_time": "timestamp",
	"input_length": "input_length", "output_length": "output_length",
	"session_id": "session_id", "delay": "delay", "delay_ms": "delay",
}

func (t *Reader) header(b []byte) error {
	for _, c := range strings.Split(string(b), ",") {
		c = strings.Trim(strings.TrimSpace(c), `"`)
		t.cols = append(t.cols, csvColumns[c])
	}
	for _, need := range []string{"input_length", "output_length"} {
		if !contains(t.cols, need) {
			return &ParseError{Line: t.line, Field: need, Err: fmt.Errorf("no such column in the CSV header %q; want timestamp (or arrival_ms), input_length, output_length, and optionally session_id, delay", string(b))}
		}
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (t *Reader) csvRow(b []byte) error {
	fields := strings.Split(string(b), ",")
	if len(fields) != len(t.cols) {
		return &ParseError{Line: t.line, Err: fmt.Errorf("want %d comma-separated fields, as the header has, got %d", len(t.cols), len(fields))}
	}
	r := &t.rec
	for i, col := range t.cols {
		v := strings.Trim(strings.TrimSpace(fields[i]), `"`)
		if col == "" || v == "" && (col == "session_id" || col == "delay" || col == "timestamp") {
			continue
		}
		switch col {
		case "timestamp", "delay":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(f) {
				return &ParseError{Line: t.line, Field: col, Err: fmt.Errorf("want a number of ms, got %q", v)}
			}
			if col == "timestamp" {
				r.TimestampMs, r.HasTimestamp = f, true
			} else {
				r.DelayMs, r.HasDelay = f, true
			}
		case "input_length", "output_length":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return &ParseError{Line: t.line, Field: col, Err: fmt.Errorf("want an integer number of tokens, got %q", v)}
			}
			hi := cluster.MaxPromptTokens
			if col == "output_length" {
				hi = cluster.MaxRequestMaxTokens
			}
			k, err := length(t.line, col, n, hi)
			if err != nil {
				return err
			}
			if col == "input_length" {
				r.InputLength = k
			} else {
				r.OutputLength = k
			}
		case "session_id":
			r.Session = v
		}
	}
	if r.InputLength == 0 {
		return &ParseError{Line: t.line, Field: "input_length", Err: errors.New("missing")}
	}
	if r.OutputLength == 0 {
		return &ParseError{Line: t.line, Field: "output_length", Err: errors.New("missing")}
	}
	return nil
}
