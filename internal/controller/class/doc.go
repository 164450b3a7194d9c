// Package class reconciles MacClasses: it records a class's revision,
// keeps a snapshot of every revision a machine still records (the machines
// render and observe from it once the class changes or goes), and checks
// what can be checked: that its DataSources exist and are Ready and, for
// AppleSMC, that its OSK Secret exists. computeClassStatus (status.go)
// derives the status from the scope; controller.go writes it once.
package class
