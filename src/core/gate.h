/* The capture gate, for the library's backends (include/ortmem/gate.h has the
 * rules). A backend wraps every driver call that synchronizes the device
 * (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease) in
 *
 *     om_capture_shared_enter();
 *     rc = cuMemMap(...);
 *     om_capture_shared_leave();
 *
 * Enter waits while a capture is active or waiting, except on the capturing
 * thread (bypass) and inside a section the thread holds already (nesting).
 * Neither call fails; neither touches the thread's error detail. Do not hold
 * a lock another thread needs to reach ortmem_capture_end across enter. */
#ifndef ORTMEM_SRC_CORE_GATE_H
#define ORTMEM_SRC_CORE_GATE_H

void om_capture_shared_enter(void);
/* Leaves the innermost section; a leave without an enter is ignored (and
 * reported as ORTMEM_E_STATE by the public ortmem_capture_shared_leave). */
void om_capture_shared_leave(void);

#endif
