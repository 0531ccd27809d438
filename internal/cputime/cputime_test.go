//go:build unix

package cputime

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSelf_GrowsWithWork(t *testing.T) {
	before := Self()
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	assert.Greater(t, Self(), before, "burning CPU shows (%d)", x)
}
