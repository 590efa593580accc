package apiserver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// HSTSHeader makes the Strict-Transport-Security header of
// --strict-transport-security-directives (max-age=SECONDS, includeSubDomains,
// preload; RFC 6797), as kube-apiserver sends it on every response: "" when
// there are none.
func HSTSHeader(directives []string) (string, error) {
	var errs []error
	maxAge := false
	for _, d := range directives {
		switch v, isMaxAge := strings.CutPrefix(d, "max-age="); {
		case d == "includeSubDomains", d == "preload":
		case isMaxAge:
			if n, err := strconv.ParseUint(v, 10, 63); err != nil || strconv.FormatUint(n, 10) != v {
				errs = append(errs, fmt.Errorf("%q: max-age takes a number of seconds", d))
			}
			maxAge = true
		default:
			errs = append(errs, fmt.Errorf("%q: the directives are max-age=SECONDS, includeSubDomains and preload", d))
		}
	}
	if len(directives) > 0 && !maxAge {
		errs = append(errs, errors.New("max-age=SECONDS is required"))
	}
	return strings.Join(directives, "; "), errors.Join(errs...)
}
