package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// controllerRef makes the macvirt object of kind named name (and pinned to
// its uid) the controller of what carries it, so the garbage collector
// deletes it with its owner.
func controllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: macvirtv1alpha1.GroupVersion.String(), Kind: kind, Name: name, UID: uid, Controller: &t}
}
