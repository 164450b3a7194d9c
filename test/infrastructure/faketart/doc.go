/*
Copyright 2026 The macvirt Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command faketart imitates the tart command for tests, keeping its state under TART_HOME.
//
// It imitates suspend and restore as tart 2.32.1 does them: tart suspend
// signals SIGUSR1 to the VM's tart run and returns (Commands/Suspend.swift);
// a run started --suspendable saves the VM's memory to state.vzvmsave and
// exits, any other fails and ends the VM, and a run of a VM with that file
// restores it instead of booting (Commands/Run.swift); a VM not running
// with that file is "suspended", a new MAC address drops the file, and a
// clone of a suspended VM keeps its MAC address and the file
// (VMDirectory.swift, Commands/Clone.swift); set --random-serial gives a
// macOS VM a machine identifier of its own (Commands/Set.swift).
package main
