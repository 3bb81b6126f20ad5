// A busy-wait's pause between polls.
#ifndef SHOAL_BASE_CPU_RELAX_H_
#define SHOAL_BASE_CPU_RELAX_H_

namespace shoal {

// Tells the CPU (and a hypervisor) that the caller spins, without giving the
// CPU up: cheaper for a sibling hyperthread, and no memory-order
// mis-speculation when the polled word changes. A few tens of nanoseconds.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace shoal

#endif  // SHOAL_BASE_CPU_RELAX_H_
