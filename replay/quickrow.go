package replay

import (
	"math"
	"strconv"
)

// quickRow decodes b into t.row, as json.Unmarshal would, when b is a row
// of the shape Mooncake traces have: an object of timestamp, input_length,
// output_length and hash_ids, each at most once, numbers as JSON writes
// them, and nothing after it but white space. It reports false, leaving
// t.row to json.Unmarshal, on anything else: another key, a key spelled
// otherwise, null, a string, a number that does not fit its field, any
// syntax error. A trace's rows are decoded at a fraction of the general
// decoder's cost, and every row it does not take decodes, or fails, as
// before.
func (t *Reader) quickRow(b []byte) bool {
	q := quickScan{b: b}
	q.space()
	if !q.byte('{') {
		return false
	}
	var seen [4]bool
	q.space()
	if q.byte('}') {
		return q.end()
	}
	for {
		q.space()
		key, ok := q.key()
		if !ok {
			return false
		}
		q.space()
		if !q.byte(':') {
			return false
		}
		q.space()
		var k int
		switch key {
		case "timestamp":
			k = 0
			f, ok := q.float()
			if !ok {
				return false
			}
			t.quick.ts = f
			t.row.Timestamp = &t.quick.ts
		case "input_length":
			k = 1
			n, ok := q.int()
			if !ok {
				return false
			}
			t.quick.in = n
			t.row.InputLength = &t.quick.in
		case "output_length":
			k = 2
			n, ok := q.int()
			if !ok {
				return false
			}
			t.quick.out = n
			t.row.OutputLength = &t.quick.out
		case "hash_ids":
			k = 3
			if !q.ids(&t.row.HashIDs) {
				return false
			}
		default:
			return false
		}
		if seen[k] {
			return false
		}
		seen[k] = true
		q.space()
		if q.byte('}') {
			return q.end()
		}
		if !q.byte(',') {
			return false
		}
	}
}

// quickKeys are the keys quickRow decodes.
var quickKeys = [...]string{"timestamp", "input_length", "output_length", "hash_ids"}

// quickScan reads a JSON row from its start.
type quickScan struct {
	b []byte
	i int
}

// space skips JSON white space.
func (q *quickScan) space() {
	for q.i < len(q.b) {
		switch q.b[q.i] {
		case ' ', '\t', '\n', '\r':
			q.i++
		default:
			return
		}
	}
}

// byte takes c if it comes next.
func (q *quickScan) byte(c byte) bool {
	if q.i < len(q.b) && q.b[q.i] == c {
		q.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (q *quickScan) end() bool {
	q.space()
	return q.i == len(q.b)
}

// key takes a string of lower-case letters and underscores, as the keys
// quickRow knows are; any other string is not for it.
func (q *quickScan) key() (string, bool) {
	if !q.byte('"') {
		return "", false
	}
	start := q.i
	for q.i < len(q.b) {
		c := q.b[q.i]
		switch {
		case c == '"':
			k := q.b[start:q.i]
			q.i++
			// Compared, not converted: no allocation.
			for _, known := range quickKeys {
				if string(k) == known {
					return known, true
				}
			}
			return "", false
		case c == '_' || 'a' <= c && c <= 'z':
			q.i++
		default:
			return "", false
		}
	}
	return "", false
}

// number takes a JSON number and returns its text, and whether it is an
// integer (no fraction, no exponent).
func (q *quickScan) number() (text []byte, integer, ok bool) {
	start := q.i
	q.byte('-')
	switch {
	case q.byte('0'):
	case q.digit19():
		q.digits()
	default:
		return nil, false, false
	}
	integer = true
	if q.byte('.') {
		integer = false
		if !q.digits() {
			return nil, false, false
		}
	}
	if q.i < len(q.b) && (q.b[q.i] == 'e' || q.b[q.i] == 'E') {
		integer = false
		q.i++
		if !q.byte('+') {
			q.byte('-')
		}
		if !q.digits() {
			return nil, false, false
		}
	}
	return q.b[start:q.i], integer, true
}

func (q *quickScan) digit19() bool {
	if q.i < len(q.b) && '1' <= q.b[q.i] && q.b[q.i] <= '9' {
		q.i++
		return true
	}
	return false
}

// digits takes one digit or more.
func (q *quickScan) digits() bool {
	start := q.i
	for q.i < len(q.b) && '0' <= q.b[q.i] && q.b[q.i] <= '9' {
		q.i++
	}
	return q.i > start
}

// float takes a number as a float64, as encoding/json reads one.
func (q *quickScan) float() (float64, bool) {
	text, _, ok := q.number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// int takes an integer that fits an int64.
func (q *quickScan) int() (int64, bool) {
	text, integer, ok := q.number()
	if !ok || !integer {
		return 0, false
	}
	n, err := strconv.ParseInt(string(text), 10, 64)
	return n, err == nil
}

// ids takes an array of integers that fit an int64, appended to *dst.
func (q *quickScan) ids(dst *[]int64) bool {
	if !q.byte('[') {
		return false
	}
	q.space()
	if q.byte(']') {
		return true
	}
	for {
		q.space()
		n, ok := q.int()
		if !ok {
			return false
		}
		*dst = append(*dst, n)
		q.space()
		if q.byte(']') {
			return true
		}
		if !q.byte(',') {
			return false
		}
	}
}
