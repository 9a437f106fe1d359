// A tensor leaked as trident could leak one, a reference never dropped (here a raw incref; a
// cycle through an autograd hook is the same), with every allocation made inside LibTorch.
// LeakSanitizer must report it: tests/sanitizers.supp once suppressed by library (leak:libc10.so),
// which matches any frame of the allocation's stack and so hid every leaked tensor. Registered
// in the ASan build only (asan_leak_canary), passing when the report appears.
#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

int main() {
  at::Tensor leaked = at::ones({4096});
  c10::raw::intrusive_ptr::incref(leaked.unsafeGetTensorImpl());  // one reference never released
  return leaked.sum().item<float>() == 4096.0F ? 0 : 3;
}
