// Command hello prints a greeting and its arguments; the image builder's
// round-trip test runs it as a container and reads its output.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Printf("hello from mocker image: %s\n", strings.Join(os.Args[1:], " "))
}
