package openapi

//go:generate go run gen_markers.go

// fieldMarkers are the comment markers of a struct field that shape its
// schema (see internal/markergen).
type fieldMarkers struct {
	optional    bool // +optional without omitempty: not required after all
	required    bool // +required with omitempty: required after all
	listType    string
	listMapKeys []string
	mapType     string
	defaultJSON string
}

// typeMarkers are the comment markers of a named type.
type typeMarkers struct {
	mapType string   // x-kubernetes-map-type of a struct or map type
	enum    []string // allowed values of a string type
}
