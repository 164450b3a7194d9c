package v1alpha1

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	macvirtv1alpha1 "github.com/macvirt/macvirt/api/v1alpha1"
)

// A class is a recipe the operator carries out with its own rights: it
// clones the disks a class names with its cluster-wide datavolumes/source
// right, and reads the OSK Secret a class names. So a class may name only
// what its author could use themselves, asked of the API server for the
// user making the request, when the reference is added or changed.

// classRight is one thing a class's author must be allowed, for a field.
type classRight struct {
	field *field.Path
	attrs authorizationv1.ResourceAttributes
	// what the right lets the operator do on the author's behalf.
	what string
}

// key identifies a right regardless of the field that needs it.
func (r classRight) key() string {
	a := r.attrs
	return a.Verb + " " + a.Group + "/" + a.Resource + "/" + a.Subresource + " " + a.Namespace + "/" + a.Name
}

// cloneRight is CDI's own clone authorisation (create on the virtual
// subresource datavolumes/source in the source's namespace), which the
// author must hold for each namespace a class clones from.
func cloneRight(p *field.Path, namespace, name, what string) classRight {
	return classRight{field: p, what: what, attrs: authorizationv1.ResourceAttributes{Namespace: namespace, Name: name, Verb: "create",
		Group: cdiv1.SchemeGroupVersion.Group, Resource: "datavolumes", Subresource: "source"}}
}

// classRights lists the rights a class's references need of its author,
// and refuses the references no right can vouch for: a Secret or ConfigMap
// named by a disk's source is read by CDI in each machine's namespace (a
// pool's, or a tenant's), which the class cannot name; only a refreshed
// image's registry source is imported in the images namespace, where it is
// asked about.
func classRights(c *macvirtv1alpha1.MacClass, imagesNamespace string) ([]classRight, field.ErrorList) {
	var rights []classRight
	var errs field.ErrorList
	spec := field.NewPath("spec")
	disks := []struct {
		p       *field.Path
		src     macvirtv1alpha1.DiskSource
		refresh bool
	}{
		{spec.Child("image"), c.Spec.Image.DiskSource, c.Spec.Image.Refresh != nil && !c.Spec.OnHosts()},
		{spec.Child("bootloader"), c.Spec.Bootloader.DiskSource, false},
	}
	if in := c.Spec.Installer; in != nil {
		ref := in.RecoverySourceRef
		disks = append(disks, struct {
			p       *field.Path
			src     macvirtv1alpha1.DiskSource
			refresh bool
		}{spec.Child("installer"), macvirtv1alpha1.DiskSource{SourceRef: &ref}, false})
	}
	for _, d := range disks {
		if ref := d.src.SourceRef; ref != nil && ref.Namespace != nil && *ref.Namespace != "" {
			p := d.p.Child("sourceRef")
			if d.p.String() == "spec.installer" {
				p = d.p.Child("recoverySourceRef")
			}
			rights = append(rights,
				classRight{field: p, what: "the operator would read it for their class",
					attrs: authorizationv1.ResourceAttributes{Namespace: *ref.Namespace, Verb: "get",
						Group: cdiv1.SchemeGroupVersion.Group, Resource: "datasources", Name: ref.Name}},
				cloneRight(p, *ref.Namespace, ref.Name, "the operator would clone from it for their class"))
		}
		src := d.src.Source
		if src == nil {
			continue
		}
		p := d.p.Child("source")
		if src.PVC != nil {
			rights = append(rights, cloneRight(p.Child("pvc"), src.PVC.Namespace, src.PVC.Name, "the operator would clone it for their class"))
		}
		if src.Snapshot != nil {
			rights = append(rights, cloneRight(p.Child("snapshot"), src.Snapshot.Namespace, src.Snapshot.Name, "the operator would clone it for their class"))
		}
		for _, named := range sourceObjects(p, src) {
			if d.refresh && named.registry && imagesNamespace != "" {
				rights = append(rights, classRight{field: named.field, what: "the operator's image import would use it for their class",
					attrs: authorizationv1.ResourceAttributes{Namespace: imagesNamespace, Verb: "get", Resource: named.resource, Name: named.name}})
				continue
			}
			errs = append(errs, field.Forbidden(named.field, fmt.Sprintf(
				"a class's disk source may not name a %s: CDI would read %q in the namespace of each machine, which the class does not choose; "+
					"import the image once (a MacImage, or a DataVolume in a namespace you may clone from) and name its DataSource in sourceRef",
				singular(named.resource), named.name)))
		}
	}
	if smc := c.Spec.Hardware.SMC; smc.Mode == macvirtv1alpha1.SMCModeAppleSMC && smc.OSKSecretRef != nil {
		ref := smc.OSKSecretRef
		rights = append(rights, classRight{field: spec.Child("hardware", "smc", "oskSecretRef"), what: "the operator would read it for their class",
			attrs: authorizationv1.ResourceAttributes{Namespace: ref.Namespace, Verb: "get", Resource: "secrets", Name: ref.Name}})
	}
	return rights, errs
}

// namedObject is a Secret or ConfigMap a CDI source names.
type namedObject struct {
	field          *field.Path
	resource, name string
	registry       bool
}

// sourceObjects lists the Secrets and ConfigMaps a CDI source names.
func sourceObjects(p *field.Path, src *cdiv1.DataVolumeSource) []namedObject {
	var out []namedObject
	add := func(f *field.Path, resource, name string, registry bool) {
		if name != "" {
			out = append(out, namedObject{field: f, resource: resource, name: name, registry: registry})
		}
	}
	if s := src.HTTP; s != nil {
		add(p.Child("http", "secretRef"), "secrets", s.SecretRef, false)
		add(p.Child("http", "certConfigMap"), "configmaps", s.CertConfigMap, false)
	}
	if s := src.Registry; s != nil {
		add(p.Child("registry", "secretRef"), "secrets", ptrValue(s.SecretRef), true)
		add(p.Child("registry", "certConfigMap"), "configmaps", ptrValue(s.CertConfigMap), true)
	}
	if s := src.S3; s != nil {
		add(p.Child("s3", "secretRef"), "secrets", s.SecretRef, false)
		add(p.Child("s3", "certConfigMap"), "configmaps", s.CertConfigMap, false)
	}
	if s := src.GCS; s != nil {
		add(p.Child("gcs", "secretRef"), "secrets", s.SecretRef, false)
	}
	if s := src.Imageio; s != nil {
		add(p.Child("imageio", "secretRef"), "secrets", s.SecretRef, false)
		add(p.Child("imageio", "certConfigMap"), "configmaps", s.CertConfigMap, false)
	}
	if s := src.VDDK; s != nil {
		add(p.Child("vddk", "secretRef"), "secrets", s.SecretRef, false)
	}
	return out
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func singular(resource string) string {
	switch resource {
	case "secrets":
		return "Secret"
	case "configmaps":
		return "ConfigMap"
	}
	return resource
}

// newRights are the rights c needs that old did not: an author who
// changes something else does not need the rights of references they left
// as they were.
func newRights(old, c []classRight) []classRight {
	had := map[string]bool{}
	for _, r := range old {
		had[r.key()] = true
	}
	var out []classRight
	for _, r := range c {
		if !had[r.key()] {
			out = append(out, r)
		}
	}
	return out
}

// authorOwns asks the API server, with a SubjectAccessReview of the user
// making the request, whether they hold each right, and refuses the fields
// whose right they lack, naming the right and what it would have let the
// operator do for them.
func authorOwns(ctx context.Context, reviews client.Client, rights []classRight) (field.ErrorList, error) {
	if len(rights) == 0 {
		return nil, nil
	}
	if reviews == nil {
		return nil, fmt.Errorf("cannot check the class author's rights: the webhook has no client")
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("the admission request carries no user to check the class's references for: %w", err)
	}
	u := req.UserInfo
	var errs field.ErrorList
	asked := map[string]bool{}
	for _, r := range rights {
		if asked[r.key()] {
			continue
		}
		asked[r.key()] = true
		allowed, err := userMay(ctx, reviews, u, r.attrs)
		if err != nil {
			return nil, err
		}
		if !allowed {
			errs = append(errs, field.Forbidden(r.field, fmt.Sprintf(
				"%s may not %s, and %s: a class may name only what its author may use; "+
					"name something you may use, or ask someone who may to author this part of the class",
				u.Username, describeRight(r.attrs), r.what)))
		}
	}
	return errs, nil
}

// describeRight says a right as kubectl auth can-i would ask it.
func describeRight(a authorizationv1.ResourceAttributes) string {
	res := a.Resource
	if a.Group != "" {
		res += "." + a.Group
	}
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	if a.Name != "" {
		res += " " + a.Name
	}
	return fmt.Sprintf("%s %s in namespace %s", a.Verb, res, a.Namespace)
}
