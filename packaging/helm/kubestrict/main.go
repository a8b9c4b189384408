// kubestrict reads rendered manifests (YAML, several documents) on stdin and decodes each into
// the Kubernetes API's own Go type for its kind, refusing unknown and duplicate fields and wrong
// types, as the API server's strict field validation does. It complements kubernetes-models
// (check.mjs), whose JSON schemas check required fields and enums but accept any unknown key.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The kinds the chart renders; another kind is an error until it is added here.
var kinds = map[string]func() any{
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                     func() any { return &corev1.Secret{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"v1/ServiceAccount":             func() any { return &corev1.ServiceAccount{} },
	"apps/v1/StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/Ingress":  func() any { return &networkingv1.Ingress{} },
}

func main() {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	failed, count := 0, 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubestrict: reading:", err)
			os.Exit(2)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			fmt.Fprintln(os.Stderr, "kubestrict: not YAML:", err)
			failed++
			continue
		}
		count++
		key := meta.APIVersion + "/" + meta.Kind
		make, ok := kinds[key]
		if !ok {
			fmt.Fprintf(os.Stderr, "kubestrict: %s %s: kind not known to this check\n", key, meta.Metadata.Name)
			failed++
			continue
		}
		if err := yaml.UnmarshalStrict(doc, make()); err != nil {
			fmt.Fprintf(os.Stderr, "kubestrict: %s %s: %v\n", key, meta.Metadata.Name, err)
			failed++
		}
	}
	if count == 0 {
		fmt.Fprintln(os.Stderr, "kubestrict: no manifest on stdin")
		os.Exit(1)
	}
	if failed > 0 {
		os.Exit(1)
	}
	fmt.Printf("kubestrict: %d manifests decode strictly\n", count)
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
