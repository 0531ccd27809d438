package serve

import (
	"unicode"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
)

// Vocab is the built-in tokenizer's vocabulary size: token ids are in
// [0, Vocab).
const Vocab = 32000

// maxPieceBytes bounds a word piece: a longer word is cut into pieces of
// this many bytes (on rune boundaries).
const maxPieceBytes = 8

// Tokenize splits text into word pieces and maps each to a token id, with
// no vocabulary file: a piece is a run of letters and digits together with
// the whitespace before it (cut every maxPieceBytes bytes), or a single
// other character with the whitespace before it; its id is the XXH3 hash
// of its bytes modulo Vocab. The same text gives the same ids in every
// run and process, and a text that starts with another's starts with its
// ids (up to the piece the shorter one ends in), so requests that share a
// text prefix share KV blocks and the router's and prefix cache's hits.
// Pieces, when given, receives each piece's text.
func Tokenize(text string, ids []uint32, pieces *[]string) []uint32 {
	for i := 0; i < len(text); {
		start := i
		for i < len(text) {
			r, n := utf8.DecodeRuneInString(text[i:])
			if !unicode.IsSpace(r) {
				break
			}
			i += n
		}
		if i == len(text) {
			if i > start {
				ids = appendPiece(ids, pieces, text[start:i])
			}
			break
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		i += n
		if isWord(r) {
			for i < len(text) {
				r, n := utf8.DecodeRuneInString(text[i:])
				if !isWord(r) || i+n-start > maxPieceBytes && i > start {
					break
				}
				i += n
			}
		}
		ids = appendPiece(ids, pieces, text[start:i])
	}
	return ids
}

func isWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

func appendPiece(ids []uint32, pieces *[]string, p string) []uint32 {
	if pieces != nil {
		*pieces = append(*pieces, p)
	}
	return append(ids, uint32(xxh3.HashString(p)%Vocab))
}
