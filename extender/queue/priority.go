package queue

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/client-go/tools/cache"
)

// plannedPriority is the priority the API server's Priority admission will
// give the pods of a Job or JobSet queued suspended, which do not exist
// yet: the value of the PriorityClass their template names; with none
// named, the smallest value of the global default classes, or 0. A class
// that does not exist is an error: the pods would be refused.
//
// Without it a suspended Job's planned pods carried no priority and queued
// at 0, whatever class they named, where the same Job's gated pods queue at
// their class's value.
func plannedPriority(classes cache.Store, pod *corev1.Pod) (int32, error) {
	if name := pod.Spec.PriorityClassName; name != "" {
		obj, ok, err := classes.GetByKey(name)
		if err != nil {
			return 0, err
		}
		pc, isClass := obj.(*schedulingv1.PriorityClass)
		if !ok || !isClass {
			return 0, fmt.Errorf("PriorityClass %q does not exist", name)
		}
		return pc.Value, nil
	}
	var def *int32
	for _, obj := range classes.List() {
		if pc, ok := obj.(*schedulingv1.PriorityClass); ok && pc.GlobalDefault && (def == nil || pc.Value < *def) {
			def = &pc.Value
		}
	}
	if def == nil {
		return 0, nil
	}
	return *def, nil
}

// setPlannedPriority gives the planned pods their priority (plannedPriority)
// where the queue reads PriorityClasses; the pods are the plan's own copies.
// Pods of one template name one class: it is resolved once per class.
func (c *Controller) setPlannedPriority(pods []*corev1.Pod) error {
	if c.o.PriorityClasses == nil {
		return nil
	}
	byClass := map[string]int32{}
	for _, pod := range pods {
		v, ok := byClass[pod.Spec.PriorityClassName]
		if !ok {
			var err error
			if v, err = plannedPriority(c.o.PriorityClasses.GetStore(), pod); err != nil {
				return err
			}
			byClass[pod.Spec.PriorityClassName] = v
		}
		pod.Spec.Priority = &v
	}
	return nil
}
