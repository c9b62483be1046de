// Package memstore is tally's in-memory state on hashicorp/go-memdb:
// resources (compact JSON, decoded on evaluation), policies and exceptions
// (compiled, opaque here), namespace labels, results (one row per resource
// UID; each result an interned entry and a time), and each
// policy's scan schedule state. It is the only importer of go-memdb, and it
// imports neither client-go nor the engine.
//
// Every index is an explicit, reflection-free indexer (schema.go); the schema
// is pinned by a golden test. Values read from the store are shared and
// immutable: copy before changing.
package memstore
