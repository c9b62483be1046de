package api

import (
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"

	kyvernov1 "github.com/tally-dev/tally/api/kyverno/v1"
	kyvernov1alpha2 "github.com/tally-dev/tally/api/kyverno/v1alpha2"
	kyvernov2 "github.com/tally-dev/tally/api/kyverno/v2"
	kyvernov2alpha1 "github.com/tally-dev/tally/api/kyverno/v2alpha1"
	kyvernov2beta1 "github.com/tally-dev/tally/api/kyverno/v2beta1"
	policiesv1 "github.com/tally-dev/tally/api/policies/v1"
	policiesv1alpha1 "github.com/tally-dev/tally/api/policies/v1alpha1"
	policiesv1beta1 "github.com/tally-dev/tally/api/policies/v1beta1"
	reportsv1 "github.com/tally-dev/tally/api/reports/v1"
	wgv1alpha2 "github.com/tally-dev/tally/api/wgpolicyk8s/v1alpha2"
)

var schemeBuilder = runtime.NewSchemeBuilder(
	kyvernov1.AddToScheme,
	kyvernov2.AddToScheme,
	kyvernov2alpha1.AddToScheme,
	kyvernov2beta1.AddToScheme,
	kyvernov1alpha2.AddToScheme,
	wgv1alpha2.AddToScheme,
	reportsv1.AddToScheme,
	policiesv1.AddToScheme,
	policiesv1beta1.AddToScheme,
	policiesv1alpha1.AddToScheme,
	// Final reports in the OpenReports API (tally-merger --report-api openreports).
	openreportsv1alpha1.AddToScheme,
)

// AddToScheme adds every kind of every version in api/ to a scheme.
func AddToScheme(s *runtime.Scheme) error { return schemeBuilder.AddToScheme(s) }
