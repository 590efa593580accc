package openapi

import (
	"reflect"

	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

func setOperation2(item *spec.PathItem, method string, op *spec.Operation) {
	switch method {
	case "get":
		item.Get = op
	case "put":
		item.Put = op
	case "post":
		item.Post = op
	case "patch":
		item.Patch = op
	case "delete":
		item.Delete = op
	}
}

func setOperation3(item *spec3.Path, method string, op *spec3.Operation) {
	switch method {
	case "get":
		item.Get = op
	case "put":
		item.Put = op
	case "post":
		item.Post = op
	case "patch":
		item.Patch = op
	case "delete":
		item.Delete = op
	}
}

func param2(p param) spec.Parameter {
	var sp spec.Parameter
	sp.Name, sp.In, sp.Description, sp.Required = p.name, p.in, p.description, p.required
	sp.Type = p.typ
	sp.UniqueItems = true
	return sp
}

func param3(p param) *spec3.Parameter {
	var sp spec3.Parameter
	sp.Name, sp.In, sp.Description, sp.Required = p.name, p.in, p.description, p.required
	sp.Schema = &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{p.typ}}, SwaggerSchemaProps: spec.SwaggerSchemaProps{}}
	sp.Schema.UniqueItems = true
	return &sp
}

func operationExtensions(o operation) spec.Extensions {
	ext := spec.Extensions{}
	if o.action != "" {
		ext.Add(extAction, o.action)
	}
	if o.gvk != nil {
		ext.Add(extGVK, gvkExtension(*o.gvk))
	}
	if len(ext) == 0 {
		return nil
	}
	return ext
}

// pathItem2 renders a path for the Swagger 2.0 document; ref names the
// definition of a Go type.
func pathItem2(p pathItem, ref func(reflect.Type) spec.Ref) spec.PathItem {
	var item spec.PathItem
	for _, pp := range p.params {
		item.Parameters = append(item.Parameters, param2(pp))
	}
	for _, o := range p.ops {
		op := &spec.Operation{}
		op.Description = o.description
		op.ID = o.id
		op.Tags = []string{o.tag}
		op.Schemes = []string{"https"}
		op.Produces = o.produces
		op.Consumes = []string{mediaAny}
		if o.body != nil {
			op.Consumes = o.bodyMedia
			var body spec.Parameter
			body.Name, body.In, body.Required = "body", "body", o.bodyRequire
			body.Schema = &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(o.body)}}
			op.Parameters = append(op.Parameters, body)
		}
		for _, pp := range o.params {
			op.Parameters = append(op.Parameters, param2(pp))
		}
		op.Responses = &spec.Responses{ResponsesProps: spec.ResponsesProps{StatusCodeResponses: map[int]spec.Response{}}}
		for _, r := range o.responses {
			resp := spec.Response{ResponseProps: spec.ResponseProps{Description: r.description}}
			if r.typ != nil {
				resp.Schema = &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(r.typ)}}
			}
			op.Responses.StatusCodeResponses[r.code] = resp
		}
		op.Extensions = operationExtensions(o)
		setOperation2(&item, o.method, op)
	}
	return item
}

// pathItem3 renders a path for an OpenAPI 3.0 document.
func pathItem3(p pathItem, ref func(reflect.Type) spec.Ref) *spec3.Path {
	item := &spec3.Path{}
	for _, pp := range p.params {
		item.Parameters = append(item.Parameters, param3(pp))
	}
	for _, o := range p.ops {
		op := &spec3.Operation{}
		op.Description = o.description
		op.OperationId = o.id
		op.Tags = []string{o.tag}
		for _, pp := range o.params {
			op.Parameters = append(op.Parameters, param3(pp))
		}
		if o.body != nil {
			content := map[string]*spec3.MediaType{}
			for _, m := range o.bodyMedia {
				content[m] = &spec3.MediaType{MediaTypeProps: spec3.MediaTypeProps{Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(o.body)}}}}
			}
			op.RequestBody = &spec3.RequestBody{RequestBodyProps: spec3.RequestBodyProps{Content: content, Required: o.bodyRequire}}
		}
		op.Responses = &spec3.Responses{ResponsesProps: spec3.ResponsesProps{StatusCodeResponses: map[int]*spec3.Response{}}}
		for _, r := range o.responses {
			resp := &spec3.Response{ResponseProps: spec3.ResponseProps{Description: r.description}}
			if r.typ != nil {
				resp.Content = map[string]*spec3.MediaType{}
				for _, m := range o.produces {
					resp.Content[m] = &spec3.MediaType{MediaTypeProps: spec3.MediaTypeProps{Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(r.typ)}}}}
				}
			}
			op.Responses.StatusCodeResponses[r.code] = resp
		}
		op.Extensions = operationExtensions(o)
		setOperation3(item, o.method, op)
	}
	return item
}
