package scan

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tally-dev/tally/api/apiresources"
)

// celPolicyGVRs are the CEL kinds, in the order they are watched.
var celPolicyGVRs = append([]schema.GroupVersionResource{apiresources.CELPolicyException}, apiresources.CELPolicies...)

func isCELPolicy(gvr schema.GroupVersionResource) bool {
	return apiresources.IsCELPolicy(gvr)
}
