package backend

import "testing"

func TestSetKeyValidate(t *testing.T) {
	for _, tc := range []struct {
		key   SetKey
		valid bool
	}{
		{SetKey{Namespace: "default", Name: "web"}, true},
		{SetKey{Namespace: "", Name: "web"}, false},
		{SetKey{Namespace: "default", Name: ""}, false},
		{SetKey{}, false},
	} {
		if err := tc.key.Validate(); (err == nil) != tc.valid {
			t.Errorf("SetKey{Namespace: %q, Name: %q}.Validate() = %v, want valid %v", tc.key.Namespace, tc.key.Name, err, tc.valid)
		}
	}
}
