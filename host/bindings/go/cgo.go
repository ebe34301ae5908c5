package deepx

// The link flags every user of the package needs; the include and library directories come
// from CGO_CFLAGS and CGO_LDFLAGS (README.md). The C helpers are in deepxgo.c.

// #cgo LDFLAGS: -ldeepx_host -ldl
import "C"
