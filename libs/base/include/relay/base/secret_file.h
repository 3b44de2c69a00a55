// A secret (a password, a token) read from the file a configuration key
// names, as relay's settings take secrets: never inline in the config.
#pragma once

#include <string>

#include "relay/base/config.h"

namespace relay {

// The content of the file `key` names, trailing whitespace stripped; "" when
// the key is unset. A file that cannot be read, or holds nothing, is recorded
// in `config` ("cannot read a password from PATH"). The content is never
// logged or put in a message.
std::string ReadSecretFile(Config& config, const std::string& key);

}  // namespace relay
