// Package nilcheck tells whether a value handed to a constructor or a write
// as an interface is really there: an interface holding a nil pointer (a
// *postgres.Store never set, a nil *sql.Tx) compares unequal to nil but
// fails at first use; and whether two such values are the same.
package nilcheck

import "reflect"

// Is reports whether v is a nil interface, or holds a nil pointer, map,
// slice, func, channel or interface.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Same reports whether a and b are the same value, such as one
// transaction found in two contexts. Values of a type that cannot be
// compared are never the same.
func Same(a, b any) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
