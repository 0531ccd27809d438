// Package indexer keeps, for a KV-aware router, a radix tree of which
// workers hold which prompt blocks, so a request's cached prefix on every
// worker is found in one walk.
//
// The tree is keyed by local block hash (a block's tokens alone); a path from
// the root is a prefix. Each node records the set of workers holding that
// block at that position, and each worker has a map from its own block keys
// (sequence hashes, as its KV events name them) to nodes, so removals need no
// walk. Stored events hang blocks under their parent (an unknown parent drops
// the event), Removed events take blocks away (unknown ones are skipped and
// reported), Cleared empties a worker. A worker may name one position with
// several keys; it holds the position until the last of them is removed.
// Nodes that no worker holds and that have no children are pruned; a node
// no worker holds keeps its children (unlike Dynamo's tree), since the
// workers' maps may still point at them. Event ids are checked for gaps
// per dp rank. The rank is not part of the tree key: the router gives each
// (worker, rank) pair its own worker id, so blocks are kept per pair.
//
// Events of the tiers below a worker's GPU pool (kv.MediumCPU and below)
// do not touch the tree: each worker keeps a set of block keys per tier,
// and TierRun continues a worker's GPU match into its host tier, then its
// disk tier, then object storage, as Dynamo's router walks them.
//
// Approx wraps an Indexer for workers that publish no events: the router
// inserts each routed prompt for the chosen worker with a TTL.
package indexer
