package merge

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultKeySecret is the Secret, in tally's namespace, holding the key the
// merger signs its final reports with (tally-merger --report-key-secret).
const DefaultKeySecret = "tally-report-key"

// keyField is the Secret's field holding the key.
const keyField = "key"

// LoadKey reads the merger's signing key from a Secret of namespace,
// making it (32 random bytes) when it does not exist yet: made reports
// true then (no final report can be signed yet: a version that did not
// sign wrote them). Every replica reads the same Secret; of two starting
// at once, the one whose create loses reads the other's key.
func LoadKey(ctx context.Context, kube kubernetes.Interface, namespace, name string) (key []byte, made bool, err error) {
	secrets := kube.CoreV1().Secrets(namespace)
	for range 3 {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if k := s.Data[keyField]; len(k) >= 16 {
				return k, false, nil
			}
			return nil, false, fmt.Errorf("secret %s/%s: its %q holds no key of 16 bytes or more: delete it, and the merger makes a new one", namespace, name, keyField)
		}
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("read the report signing key, secret %s/%s: %w", namespace, name, err)
		}
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return nil, false, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
				Labels: map[string]string{"app.kubernetes.io/name": "tally", "app.kubernetes.io/component": "merger"}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{keyField: k}}, metav1.CreateOptions{})
		if err == nil {
			return k, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("make the report signing key, secret %s/%s: %w", namespace, name, err)
		}
	}
	return nil, false, fmt.Errorf("the report signing key, secret %s/%s: made and deleted again while read", namespace, name)
}
