// Package repo checks promises the repository itself makes: the PROJECT
// file matches the API types, the README's quick start is the two commands
// it promises, the Makefile offers the documented targets, imports run the
// way docs/architecture.md draws them (between packages, between folders
// and between the files of a package), the shipped binaries link nothing
// of the test wing, and a reconcile step's name says whether it writes.
package repo
