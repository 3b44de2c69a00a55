// Random identifiers (request ids, installation ids, tokens, nonces).
#pragma once

#include <cstddef>
#include <string>

namespace relay {

// `bytes` bytes from OpenSSL's CSPRNG as lowercase hex (2 * bytes chars).
// Any thread. Should the generator ever fail (it does not once seeded), the
// bytes come from the clock, a counter and the address space instead, never
// a constant: the ids must still differ.
std::string RandomHex(size_t bytes);

}  // namespace relay
