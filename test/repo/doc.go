// Package repo checks promises the repository itself makes: the PROJECT
// file matches the API types, the README's quick start is the two commands
// it promises, and the Makefile offers the documented targets.
package repo
