// Package jsonval reads the numbers of decoded JSON (or JavaScript) values
// — Int, Float, Millis, each with its range — and names a value in the
// words an error message uses: "workers: want an integer in [1, 1024], got
// string \"x\"". Every config and script reader uses it, so every bad
// number is reported in that one shape.
package jsonval

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// maxQuoted is how much of a string value a description quotes; a longer
// one is cut, so a pasted document does not swamp the message.
const maxQuoted = 40

// Describe names v's kind and, for a scalar, its value: null, string "x",
// boolean true, number 1.5, an object, an array. It understands what
// encoding/json and JavaScript runtimes decode to (every Go numeric type
// and json.Number); anything else is named by its Go type.
func Describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > maxQuoted {
			x = x[:maxQuoted] + "…"
		}
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case json.Number:
		return "number " + x.String()
	case float64:
		return "number " + strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return "number " + strconv.FormatFloat(float64(x), 'g', -1, 32)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprintf("number %d", x)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}
