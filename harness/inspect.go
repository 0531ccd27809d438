package harness

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/grafana/sobek"
)

// inspectDepth is how deep console output shows nested objects before
// abbreviating them as [Object] or [Array], as Node's util.inspect does.
const inspectDepth = 2

var identifierRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// inspect renders a console argument the way k6 prints it (Node's
// util.inspect style, on one line): strings as they are at the top level,
// objects as { a: 1, b: [ 1, 2 ] } with nested strings quoted.
func inspect(rt *sobek.Runtime, val sobek.Value) string {
	if _, isObj := val.(*sobek.Object); !isObj && val != nil {
		if s, isStr := val.Export().(string); isStr {
			return s
		}
	}
	var b strings.Builder
	in := inspector{rt: rt, b: &b}
	in.value(val, 0)
	return b.String()
}

type inspector struct {
	rt    *sobek.Runtime
	b     *strings.Builder
	stack []*sobek.Object // objects being printed, to spot cycles
}

func (in *inspector) value(val sobek.Value, depth int) {
	switch {
	case val == nil || sobek.IsUndefined(val):
		in.b.WriteString("undefined")
		return
	case sobek.IsNull(val):
		in.b.WriteString("null")
		return
	}
	obj, isObj := val.(*sobek.Object)
	if !isObj {
		in.primitive(val)
		return
	}
	for _, o := range in.stack {
		if o.SameAs(obj) {
			in.b.WriteString("[Circular]")
			return
		}
	}
	if fn, ok := sobek.AssertFunction(val); ok && fn != nil {
		name := obj.Get("name")
		if name == nil || name.String() == "" {
			in.b.WriteString("[Function (anonymous)]")
		} else {
			in.b.WriteString("[Function: " + name.String() + "]")
		}
		return
	}
	switch obj.ClassName() {
	case "Error":
		in.b.WriteString(obj.String())
		return
	case "Date":
		in.b.WriteString(in.call(obj, "toISOString"))
		return
	case "RegExp", "Boolean", "Number", "String", "Symbol":
		in.b.WriteString(obj.String())
		return
	}
	in.stack = append(in.stack, obj)
	defer func() { in.stack = in.stack[:len(in.stack)-1] }()
	switch obj.ClassName() {
	case "Array":
		if depth > inspectDepth {
			in.b.WriteString("[Array]")
			return
		}
		n := int(obj.Get("length").ToInteger())
		if n == 0 {
			in.b.WriteString("[]")
			return
		}
		in.b.WriteString("[ ")
		for i := range n {
			if i > 0 {
				in.b.WriteString(", ")
			}
			in.value(obj.Get(strconv.Itoa(i)), depth+1)
		}
		in.b.WriteString(" ]")
		return
	}
	for _, kind := range []string{"Map", "Set"} {
		if ctor, ok := in.rt.Get(kind).(*sobek.Object); ok && in.rt.InstanceOf(obj, ctor) {
			in.collection(obj, kind, depth)
			return
		}
	}
	prefix := in.constructorName(obj)
	if depth > inspectDepth {
		if prefix == "" {
			prefix = "Object"
		}
		in.b.WriteString("[" + prefix + "]")
		return
	}
	if prefix != "" {
		in.b.WriteString(prefix + " ")
	}
	keys := obj.Keys()
	if len(keys) == 0 {
		in.b.WriteString("{}")
		return
	}
	in.b.WriteString("{ ")
	for i, k := range keys {
		if i > 0 {
			in.b.WriteString(", ")
		}
		if identifierRE.MatchString(k) {
			in.b.WriteString(k)
		} else {
			in.b.WriteString(quoteJS(k))
		}
		in.b.WriteString(": ")
		in.value(obj.Get(k), depth+1)
	}
	in.b.WriteString(" }")
}

// collection prints a Map or Set: Map(2) { 'a' => 1, 'b' => 2 }.
func (in *inspector) collection(obj *sobek.Object, kind string, depth int) {
	size := obj.Get("size").ToInteger()
	in.b.WriteString(kind + "(" + strconv.FormatInt(size, 10) + ") ")
	if depth > inspectDepth {
		in.b.WriteString("[" + kind + "]")
		return
	}
	if size == 0 {
		in.b.WriteString("{}")
		return
	}
	entries, ok := sobek.AssertFunction(obj.Get("entries"))
	if !ok {
		in.b.WriteString("{}")
		return
	}
	it, err := entries(obj)
	if err != nil {
		in.b.WriteString("{}")
		return
	}
	arr := in.rt.Get("Array").ToObject(in.rt)
	from, _ := sobek.AssertFunction(arr.Get("from"))
	list, err := from(arr, it)
	if err != nil {
		in.b.WriteString("{}")
		return
	}
	lo := list.ToObject(in.rt)
	in.b.WriteString("{ ")
	for i := range int(lo.Get("length").ToInteger()) {
		if i > 0 {
			in.b.WriteString(", ")
		}
		pair := lo.Get(strconv.Itoa(i)).ToObject(in.rt)
		in.value(pair.Get("0"), depth+1)
		if kind == "Map" {
			in.b.WriteString(" => ")
			in.value(pair.Get("1"), depth+1)
		}
	}
	in.b.WriteString(" }")
}

// constructorName is the class of an object made by a constructor other
// than Object ("" for plain objects).
func (in *inspector) constructorName(obj *sobek.Object) string {
	proto := obj.Prototype()
	if proto == nil {
		return "[Object: null prototype]"
	}
	ctor, ok := proto.Get("constructor").(*sobek.Object)
	if !ok {
		return ""
	}
	name := ctor.Get("name")
	if name == nil || name.String() == "Object" {
		return ""
	}
	return name.String()
}

func (in *inspector) call(obj *sobek.Object, method string) string {
	fn, ok := sobek.AssertFunction(obj.Get(method))
	if !ok {
		return obj.String()
	}
	res, err := fn(obj)
	if err != nil {
		return obj.String()
	}
	return res.String()
}

func (in *inspector) primitive(val sobek.Value) {
	switch x := val.Export().(type) {
	case string:
		in.b.WriteString(quoteJS(x))
	case float64:
		if x == 0 && math.Signbit(x) {
			in.b.WriteString("-0")
			return
		}
		in.b.WriteString(val.String())
	default:
		if _, isBig := val.Export().(interface{ Int64() int64 }); isBig {
			in.b.WriteString(val.String() + "n")
			return
		}
		in.b.WriteString(val.String())
	}
}

// quoteJS quotes s as Node prints strings inside objects: single quotes,
// or double quotes when s has single quotes but no double ones.
func quoteJS(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`, q, `\`+q)
	return q + r.Replace(s) + q
}
