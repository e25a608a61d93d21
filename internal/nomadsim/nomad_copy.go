package nomadsim

import (
	"reflect"
	"sync"
)

// deepCopy returns a copy of v that shares no mutable memory with it. The
// simulated Nomad copies every job and volume on the way in and on the way
// out, as a real server's wire encoding does, so a caller that mutates what it
// got back (or what it sent) cannot change the simulation's state behind its
// back. Reflection keeps this generic over the large api structs while being
// several times cheaper than a JSON round trip.
func deepCopy[T any](v T) T {
	src := reflect.ValueOf(&v).Elem()
	dst := reflect.New(src.Type()).Elem()
	copyValue(dst, src)
	return dst.Interface().(T)
}

// copyValue deep-copies src into the settable dst of the same type.
// Unexported struct fields (time.Time's location, for example) are copied
// shallowly: they cannot be set through reflection and are immutable in the
// types the api package uses.
func copyValue(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		n := reflect.New(src.Type().Elem())
		copyValue(n.Elem(), src.Elem())
		dst.Set(n)
	case reflect.Struct:
		dst.Set(src)
		for _, i := range deepFields(src.Type()) {
			copyValue(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		n := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		if needsDeep(src.Type().Elem().Kind()) {
			for i := 0; i < src.Len(); i++ {
				copyValue(n.Index(i), src.Index(i))
			}
		} else {
			reflect.Copy(n, src)
		}
		dst.Set(n)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		n := reflect.MakeMapWithSize(src.Type(), src.Len())
		deep := needsDeep(src.Type().Elem().Kind())
		iter := src.MapRange()
		for iter.Next() {
			val := iter.Value()
			if deep {
				c := reflect.New(val.Type()).Elem()
				copyValue(c, val)
				val = c
			}
			n.SetMapIndex(iter.Key(), val)
		}
		dst.Set(n)
	case reflect.Interface:
		if src.IsNil() {
			return
		}
		c := reflect.New(src.Elem().Type()).Elem()
		copyValue(c, src.Elem())
		dst.Set(c)
	case reflect.Array:
		for i := 0; i < src.Len(); i++ {
			copyValue(dst.Index(i), src.Index(i))
		}
	default:
		dst.Set(src)
	}
}

// needsDeep reports whether values of kind k can hold references that a
// shallow copy would share.
func needsDeep(k reflect.Kind) bool {
	switch k {
	case reflect.Pointer, reflect.Struct, reflect.Slice, reflect.Map, reflect.Interface, reflect.Array:
		return true
	}
	return false
}

// fieldPlans caches, per struct type, the indexes of the exported fields
// that need a deep copy: looking fields up through reflection on every copy
// costs more than the copy itself.
var fieldPlans sync.Map // reflect.Type → []int

func deepFields(t reflect.Type) []int {
	if p, ok := fieldPlans.Load(t); ok {
		return p.([]int)
	}
	var plan []int
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.IsExported() && needsDeep(f.Type.Kind()) {
			plan = append(plan, i)
		}
	}
	fieldPlans.Store(t, plan)
	return plan
}

// deepEqual reports whether a and b hold equal values, as reflect.DeepEqual
// does for the acyclic api types. It tracks no visited pointers, which makes
// it several times cheaper than reflect.DeepEqual on a job: every register
// compares the new spec with the stored one.
func deepEqual[T any](a, b T) bool {
	return equalValue(reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem())
}

func equalValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		if a.Pointer() == b.Pointer() {
			return true
		}
		return equalValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i, n := 0, a.NumField(); i < n; i++ {
			if !equalValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !equalValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Array:
		for i := 0; i < a.Len(); i++ {
			if !equalValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		iter := a.MapRange()
		for iter.Next() {
			bv := b.MapIndex(iter.Key())
			if !bv.IsValid() || !equalValue(iter.Value(), bv) {
				return false
			}
		}
		return true
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		if a.Elem().Type() != b.Elem().Type() {
			return false
		}
		return equalValue(a.Elem(), b.Elem())
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		// Nothing in the api types; compare as DeepEqual does for the
		// cases that matter (both nil).
		return a.IsNil() && b.IsNil()
	default:
		return !a.IsValid() && !b.IsValid()
	}
}
