#include "support/fixtures.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <fstream>
#include <sstream>

#include "support/subprocess.h"

namespace relay::testing {

std::vector<CorpusPayload> LoadCorpus() {
  std::string dir = Env("RELAY_IT_CORPUS");
  std::ifstream manifest(dir + "/manifest.tsv");
  std::vector<CorpusPayload> out;
  std::string line;
  while (std::getline(manifest, line)) {
    std::istringstream fields(line);
    CorpusPayload p;
    std::string file;
    std::getline(fields, p.event, '\t');
    std::getline(fields, file, '\t');
    std::getline(fields, p.signature, '\t');
    p.body = ReadFile(dir + "/" + file);
    out.push_back(std::move(p));
  }
  return out;
}

std::pair<std::string, std::string> NewRsaKeyPairPem() {
  EVP_PKEY* pkey = EVP_RSA_gen(2048);
  auto pem = [&](bool priv) {
    BIO* bio = BIO_new(BIO_s_mem());
    if (priv) {
      PEM_write_bio_PrivateKey(bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
    } else {
      PEM_write_bio_PUBKEY(bio, pkey);
    }
    char* data = nullptr;
    long len = BIO_get_mem_data(bio, &data);
    std::string text(data, static_cast<size_t>(len));
    BIO_free(bio);
    return text;
  };
  auto pair = std::make_pair(pem(true), pem(false));
  EVP_PKEY_free(pkey);
  return pair;
}

}  // namespace relay::testing
