package registry

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// NameColumn is the first column of every Table.
var NameColumn = metav1.TableColumnDefinition{
	Name: "Name", Type: "string", Format: "name",
	Description: metav1.ObjectMeta{}.SwaggerDoc()["name"],
}

// AgeColumn is the last column of most Tables.
var AgeColumn = metav1.TableColumnDefinition{
	Name: "Age", Type: "string",
	Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
}

// Age renders the time since ts the way kubectl shows it ("5m10s", "3d").
func Age(ts metav1.Time, now time.Time) string {
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(ts.Time))
}
