// Package kv holds the vocabulary shared by every part of mocker that speaks
// about KV-cache blocks: the block hashes (bit-compatible with Dynamo's router)
// and the Stored / Removed / Cleared events a worker publishes when its pool
// changes.
//
// Hashes: a block's local hash is XXH3-64 with seed 1337 over the block's
// token ids written as little-endian uint32. A block's sequence hash chains
// it to its prefix: block 0's sequence hash equals its local hash; block i's
// is XXH3-64 (seed 1337) over the 16 bytes [parent sequence hash LE u64,
// local hash LE u64]. Only complete blocks are hashed.
package kv
