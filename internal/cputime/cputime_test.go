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

func TestFaults_GrowWithFreshMemory(t *testing.T) {
	before := Faults()
	// 16 MiB the process has never touched: a fault per page at least
	// (fewer only with huge pages, still at least one).
	b := make([]byte, 16<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	assert.Greater(t, Faults(), before, "touching fresh pages shows (%d)", b[len(b)-4096])
}
