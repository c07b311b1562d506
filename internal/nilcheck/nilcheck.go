// Package nilcheck tells whether a value handed to a constructor or a write
// is really there: an interface holding a nil pointer (a *postgres.Store
// never set, a nil *sql.Tx) compares unequal to nil but fails at first use.
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
