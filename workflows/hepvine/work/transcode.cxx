// hepvine-transcode: copy ROOT files, recompressing every basket of every TTree with a new compression setting one by
// one -- each basket is decompressed and compressed again, its bytes never un-streamed into values -- like ROOT's fast
// cloning (TTreeCloner) with a new codec. It serves requests, one per line on stdin, "SOURCE<TAB>COPY<TAB>SETTING"
// (SETTING e.g. 505: ZSTD level 5), and answers each with one line of JSON on stdout: the manifest of what SOURCE
// holds (with a SHA-256 per branch of its decompressed baskets, for hepvine.work.transcode to check the copy against,
// and the seconds spent reading, decompressing, hashing, compressing and writing baskets), or {"unsupported": why}, or
// {"error": why}. ROOT starts once for all the files of a job. It ends at the end of its input.
//
// Per top-level key of SOURCE (latest cycle):
//   TTree of plain (leaf-list) branches, or of classes without a dictionary here (CMSSW's MetaData, ParameterSets:
//   their baskets are bytes like any other)
//                                       -> an empty clone of the tree, its baskets transcoded into it;
//   any other object (TObjString tag, histograms) -> its key transcoded (the object's bytes as they are);
//   anything else (RNTuple, directories, branches of classes with a dictionary, baskets kept in the tree's record)
//                                       -> {"unsupported": ...}, nothing written.
#include <RZip.h>
#include <TBasket.h>
#include <TBranch.h>
#include <TBranchElement.h>
#include <TBufferFile.h>
#include <TClass.h>
#include <TError.h>
#include <TFile.h>
#include <TKey.h>
#include <TLeaf.h>
#include <TList.h>
#include <TROOT.h>
#include <TStreamerInfo.h>
#include <TTree.h>

#include <dlfcn.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// libzstd's API (exported by ROOT's libCore, which builds it in; the sandbox has no zstd.h): the four calls used.
extern "C" {
typedef struct ZSTD_CCtx_s ZSTD_CCtx;
ZSTD_CCtx *ZSTD_createCCtx(void);
size_t ZSTD_compressCCtx(ZSTD_CCtx *cctx, void *dst, size_t dstCapacity, const void *src, size_t srcSize, int level);
unsigned ZSTD_isError(size_t code);
}

namespace {

constexpr int kZstd = ROOT::RCompressionSetting::EAlgorithm::kZSTD;
constexpr int kBlockHeader = 9;  // ROOT's header of a compressed block: algorithm (2), method, sizes (3 + 3, LE)

// Seconds spent on the baskets, by step (the manifest reports them: decompression alone is the floor of any engine).
struct Clock {
   double read = 0, inflate = 0, hash = 0, deflate = 0, other = 0;  // other: writing, metadata, opening
   long long baskets = 0, payload = 0, zipped = 0;        // baskets transcoded, their bytes decompressed and after
   std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
   void Lap(double &step)
   {
      const auto now = std::chrono::steady_clock::now();
      step += std::chrono::duration<double>(now - last).count();
      last = now;
   }
};
Clock gClock;

struct Unsupported : std::runtime_error {
   using std::runtime_error::runtime_error;
};

std::string Quoted(const std::string &text)
{
   std::string out = "\"";
   for (unsigned char c : text) {
      if (c == '"' || c == '\\') {
         out += '\\';
         out += static_cast<char>(c);
      } else if (c < 0x20) {
         char escaped[8];
         std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
         out += escaped;
      } else {
         out += static_cast<char>(c);
      }
   }
   return out + "\"";
}

// The NBYTES bytes at SRC (a key's payload) decompressed into OUT (OBJLEN bytes); a payload stored as it is when
// NBYTES == OBJLEN (ROOT's own rule).
void Inflate(const unsigned char *src, int nbytes, int objlen, std::vector<unsigned char> &out, const std::string &what)
{
   out.resize(objlen);
   if (nbytes == objlen) {
      std::memcpy(out.data(), src, objlen);
      return;
   }
   int done = 0;
   while (done < objlen) {
      int nin = 0, nbuf = 0, nout = 0;
      if (nbytes < 9 || R__unzip_header(&nin, src, &nbuf) != 0 || nin > nbytes || nbuf > objlen - done)
         throw std::runtime_error(what + ": damaged compressed block");
      R__unzip(&nin, src, &nbuf, out.data() + done, &nout);
      if (nout != nbuf)
         throw std::runtime_error(what + ": a compressed block does not decompress");
      done += nout;
      src += nin;
      nbytes -= nin;
   }
}

// One ZSTD block in ROOT's framing: SRC compressed at zstd's own LEVEL into DST (CAPACITY bytes); its size, or 0 when
// it does not fit. ROOT's own ZSTD writer uses zstd level 2 x LEVEL (setting 505: zstd 10): on NanoAOD that is twice
// the CPU for 1% smaller baskets, so the transcoder compresses at the level the setting names; any level reads alike.
int ZstdBlock(int level, const unsigned char *src, int srcsize, char *dst, int capacity)
{
   static ZSTD_CCtx *context = ZSTD_createCCtx();
   if (capacity <= kBlockHeader)
      return 0;
   const size_t n = ZSTD_compressCCtx(context, dst + kBlockHeader, capacity - kBlockHeader, src, srcsize, level);
   if (ZSTD_isError(n))
      return 0;
   const unsigned char header[kBlockHeader] = {'Z', 'S', 1, static_cast<unsigned char>(n & 0xff),
      static_cast<unsigned char>((n >> 8) & 0xff), static_cast<unsigned char>((n >> 16) & 0xff),
      static_cast<unsigned char>(srcsize & 0xff), static_cast<unsigned char>((srcsize >> 8) & 0xff),
      static_cast<unsigned char>((srcsize >> 16) & 0xff)};
   std::memcpy(dst, header, kBlockHeader);
   return static_cast<int>(n) + kBlockHeader;
}

// PAYLOAD compressed with SETTING in ROOT's blocks (at most kMAXZIPBUF each) into OUT; returns its size, or the
// payload's own size when compression does not make it smaller (then the payload is stored as it is, as ROOT does).
int Deflate(int setting, const std::vector<unsigned char> &payload, std::vector<char> &out)
{
   const int objlen = static_cast<int>(payload.size());
   const int level = setting % 100;
   if (level == 0 || objlen == 0)
      return objlen;
   const int algorithm = setting / 100;
   // Room for a block that does not shrink: zstd fails on a small target before it has tried everything.
   out.resize(objlen + (objlen / kMAXZIPBUF + 1) * (kBlockHeader + 64) + objlen / 128);
   int total = 0;
   for (int start = 0; start < objlen; start += kMAXZIPBUF) {
      int srcsize = std::min<int>(kMAXZIPBUF, objlen - start);
      int tgtsize = std::min(srcsize, objlen - total);
      int nout = 0;
      if (algorithm == kZstd)
         nout = ZstdBlock(level, payload.data() + start, srcsize, out.data() + total,
                          static_cast<int>(out.size()) - total);
      else
         R__zipMultipleAlgorithm(level, &srcsize, reinterpret_cast<const char *>(payload.data()) + start, &tgtsize,
                                 out.data() + total, &nout,
                                 static_cast<ROOT::RCompressionSetting::EAlgorithm::EValues>(algorithm));
      if (nout == 0 || total + nout >= objlen)
         return objlen;
      total += nout;
   }
   return total;
}

// SHA-256 by the system's OpenSSL (libcrypto, loaded at run time: Python's hashlib uses it too, so it is wherever
// hepvine runs; its SHA extensions hash ~3x faster than ROOT's MD5, which cost a sixth of the transcoder's time).
class Sha256 {
public:
   Sha256() : fContext(Crypto().create())
   {
      if (!fContext || !Crypto().init(fContext, Crypto().sha256(), nullptr))
         throw std::runtime_error("OpenSSL's SHA-256 cannot be started");
   }
   ~Sha256() { Crypto().destroy(fContext); }
   Sha256(const Sha256 &) = delete;
   Sha256 &operator=(const Sha256 &) = delete;
   void Update(const void *data, size_t size)
   {
      if (!Crypto().update(fContext, data, size))
         throw std::runtime_error("OpenSSL's SHA-256 failed");
   }
   std::string HexDigest()
   {
      unsigned char out[32];
      unsigned int size = 0;
      if (!Crypto().final(fContext, out, &size) || size != sizeof out)
         throw std::runtime_error("OpenSSL's SHA-256 failed");
      char hex[2 * sizeof out + 1];
      for (unsigned i = 0; i < sizeof out; ++i)
         std::snprintf(hex + 2 * i, 3, "%02x", out[i]);
      return hex;
   }

private:
   struct Api {
      void *(*create)();
      void (*destroy)(void *);
      const void *(*sha256)();
      int (*init)(void *, const void *, void *);
      int (*update)(void *, const void *, size_t);
      int (*final)(void *, unsigned char *, unsigned int *);
   };
   static const Api &Crypto()
   {
      static const Api api = Load();
      return api;
   }
   static Api Load()
   {
      void *library = nullptr;
      for (const char *name : {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"})
         if ((library = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
            break;
      if (!library)
         throw std::runtime_error(std::string("hashing baskets needs OpenSSL's libcrypto (libcrypto.so.3; Debian's "
                                              "libssl3t64), which cannot be loaded here: ") + dlerror());
      Api api{};
      Bind(library, "EVP_MD_CTX_new", api.create);
      Bind(library, "EVP_MD_CTX_free", api.destroy);
      Bind(library, "EVP_sha256", api.sha256);
      Bind(library, "EVP_DigestInit_ex", api.init);
      Bind(library, "EVP_DigestUpdate", api.update);
      Bind(library, "EVP_DigestFinal_ex", api.final);
      return api;
   }
   template <typename F>
   static void Bind(void *library, const char *name, F &function)
   {
      function = reinterpret_cast<F>(dlsym(library, name));
      if (!function)
         throw std::runtime_error(std::string("OpenSSL's libcrypto lacks ") + name);
   }
   void *fContext;
};

// One basket moved from the source's branch to the copy's: read raw, decompressed, compressed, written at the end of
// the copy with its header re-streamed by ROOT (new size and place, the rest as in the source).
class BasketTranscoder : public TBasket {
public:
   void Copy(TBranch *from, Int_t j, TBranch *to, TFile *out, int setting, Sha256 &digest)
   {
      const std::string what = std::string(from->GetTree()->GetName()) + "/" + from->GetName() + " basket " +
                               std::to_string(j);
      gClock.Lap(gClock.other);
      if (LoadBasketBuffers(from->GetBasketSeek(j), from->GetBasketBytes()[j], from->GetFile(), from->GetTree()))
         throw std::runtime_error(what + ": cannot be read");
      const auto *raw = reinterpret_cast<const unsigned char *>(fBufferRef->Buffer());
      gClock.Lap(gClock.read);
      Inflate(raw + fKeylen, fNbytes - fKeylen, fObjlen, fPayload, what);
      gClock.Lap(gClock.inflate);
      digest.Update(fPayload.data(), fObjlen);
      gClock.Lap(gClock.hash);
      const int nzip = Deflate(setting, fPayload, fZipped);
      gClock.Lap(gClock.deflate);
      gClock.baskets += 1;
      gClock.payload += fObjlen;
      gClock.zipped += nzip;
      const char *body = nzip == fObjlen ? reinterpret_cast<const char *>(fPayload.data()) : fZipped.data();
      if (fVersion <= 1000 && out->GetEND() + fKeylen + nzip > INT_MAX)
         throw Unsupported(what + " has a 32-bit key and the copy passes 2 GB");
      fKey.resize(fKeylen + nzip);
      fBuffer = fKey.data();
      const TDatime written_at = fDatime;
      Create(nzip, out);
      fDatime = written_at;
      TBufferFile header(TBuffer::kWrite, fKeylen + 64);
      fHeaderOnly = kTRUE;
      Streamer(header);
      fHeaderOnly = kFALSE;
      if (header.Length() != fKeylen)
         throw std::runtime_error(what + ": its key header changed size when written again");
      std::memcpy(fKey.data(), header.Buffer(), fKeylen);
      std::memcpy(fKey.data() + fKeylen, body, nzip);
      const Int_t written = WriteFileKeepBuffer(out);
      fBuffer = nullptr;
      if (written != fNbytes)
         throw std::runtime_error(std::string("writing ") + out->GetName() + " failed: " + std::strerror(errno));
      to->AddBasket(*this, true, from->GetBasketEntry()[j]);
   }

private:
   std::vector<unsigned char> fPayload;
   std::vector<char> fZipped;
   std::vector<char> fKey;
};

// A top-level object's key: its bytes decompressed and compressed again, class, name, title and date kept.
class ObjectKey : public TKey {
public:
   ObjectKey(TFile *out, TKey *source, int setting) : TKey(out)
   {
      SetName(source->GetName());
      SetTitle(source->GetTitle());
      fClassName = source->GetClassName();
      fKeylen = Sizeof();
      fObjlen = source->GetObjlen();
      source->SetBuffer();
      if (!source->ReadFile())
         throw std::runtime_error(std::string(source->GetName()) + ": its key cannot be read");
      std::vector<unsigned char> payload;
      std::vector<char> zipped;
      Inflate(reinterpret_cast<const unsigned char *>(source->GetBuffer()), source->GetNbytes() - source->GetKeylen(),
              fObjlen, payload, source->GetName());
      const int nzip = Deflate(setting, payload, zipped);
      Create(nzip, out);
      fDatime = source->GetDatime();
      fCycle = out->AppendKey(this);
      std::memcpy(fBuffer + fKeylen, nzip == fObjlen ? reinterpret_cast<const char *>(payload.data()) : zipped.data(),
                  nzip);
      if (WriteFile(fCycle, out) != fNbytes)
         throw std::runtime_error(std::string("writing ") + out->GetName() + " failed: " + std::strerror(errno));
   }
};

bool PlainBranch(TBranch *branch)
{
   return branch->IsA() == TBranch::Class() && branch->GetListOfBranches()->GetEntriesFast() == 0;
}

bool LacksDictionary(TBranch *branch)
{
   auto *element = dynamic_cast<TBranchElement *>(branch);
   if (!element)
      return false;
   TClass *cls = TClass::GetClass(element->GetClassName());
   return !cls || !cls->IsLoaded();
}

// Every branch of BRANCHES, each followed by its sub-branches (depth first, as ROOT and uproot list them).
void AllBranches(TObjArray *branches, std::vector<TBranch *> &out)
{
   for (auto *object : *branches) {
      auto *branch = static_cast<TBranch *>(object);
      out.push_back(branch);
      AllBranches(branch->GetListOfBranches(), out);
   }
}

// Unsupported unless every branch of TREE is a leaf-list branch or one of a class without a dictionary here, with
// every basket in a key of its own.
void Classify(TTree *tree)
{
   std::vector<TBranch *> branches;
   AllBranches(tree->GetListOfBranches(), branches);
   for (auto *branch : branches) {
      if (!LacksDictionary(branch) && !PlainBranch(branch))
         throw Unsupported(std::string(tree->GetName()) + "/" + branch->GetName() + " is a " +
                           branch->IsA()->GetName() + " (only leaf-list branches are transcoded)");
      for (Int_t j = 0; j < branch->GetWriteBasket(); ++j)
         if (branch->GetBasketSeek(j) == 0 || branch->GetBasketBytes()[j] <= 0)
            throw Unsupported(std::string(tree->GetName()) + "/" + branch->GetName() + " has a basket without a key");
      auto *kept = static_cast<TBasket *>(branch->GetListOfBaskets()->At(branch->GetWriteBasket()));
      if (kept && kept->GetNevBuf() > 0)
         throw Unsupported(std::string(tree->GetName()) + "/" + branch->GetName() +
                           " keeps entries in a basket inside the tree's record");
   }
}

std::string LeafJson(TLeaf *leaf)
{
   std::ostringstream out;
   out << "[" << Quoted(leaf->GetName()) << "," << Quoted(leaf->IsA()->GetName()) << "," << Quoted(leaf->GetTitle())
       << "," << leaf->GetLenStatic() << "," << leaf->GetLenType() << "," << (leaf->IsUnsigned() ? "true" : "false")
       << "," << (leaf->IsRange() ? "true" : "false") << ","
       << (leaf->GetLeafCount() ? Quoted(leaf->GetLeafCount()->GetName()) : "null") << "]";
   return out.str();
}

// The tree IN copied into OUT basket by basket; returns its manifest entry (JSON).
std::string TranscodeTree(TTree *in, TFile *out, int setting)
{
   out->cd();
   TTree *copy = in->CloneTree(0);
   if (!copy)
      throw std::runtime_error(std::string(in->GetName()) + ": ROOT cannot clone the tree");
   BasketTranscoder transcoder;
   std::ostringstream json;
   json << "{\"kind\":\"transcode\",\"entries\":" << in->GetEntries() << ",\"aliases\":{";
   if (TList *aliases = in->GetListOfAliases()) {
      const char *comma = "";
      for (auto *alias : *aliases) {
         json << comma << Quoted(alias->GetName()) << ":" << Quoted(alias->GetTitle());
         comma = ",";
      }
   }
   json << "},\"branches\":[";
   std::vector<TBranch *> sources, targets;
   AllBranches(in->GetListOfBranches(), sources);
   AllBranches(copy->GetListOfBranches(), targets);
   if (sources.size() != targets.size())
      throw std::runtime_error(std::string(in->GetName()) + ": its clone has " + std::to_string(targets.size()) +
                               " branches, the tree " + std::to_string(sources.size()));
   for (size_t i = 0; i < sources.size(); ++i) {
      TBranch *from = sources[i], *to = targets[i];
      if (std::strcmp(from->GetName(), to->GetName()) != 0)
         throw std::runtime_error(std::string(in->GetName()) + "/" + from->GetName() +
                                  ": not where expected in the clone");
      to->SetCompressionSettings(setting);
      Sha256 digest;
      const Int_t baskets = from->GetWriteBasket();
      for (Int_t j = 0; j < baskets; ++j)
         transcoder.Copy(from, j, to, out, setting, digest);
      to->AddLastBasket(from->GetBasketEntry()[baskets]);
      if (to->GetEntries() != from->GetEntries())
         throw std::runtime_error(std::string(in->GetName()) + "/" + from->GetName() + ": " +
                                  std::to_string(to->GetEntries()) + " entries copied of " +
                                  std::to_string(from->GetEntries()));
      json << (i ? "," : "") << "{\"name\":" << Quoted(from->GetName()) << ",\"title\":" << Quoted(from->GetTitle())
           << ",\"class\":" << Quoted(from->IsA()->GetName()) << ",\"entries\":" << from->GetEntries()
           << ",\"basket_entry\":[";
      for (Int_t j = 0; j <= baskets; ++j)
         json << (j ? "," : "") << from->GetBasketEntry()[j];
      json << "],\"sha256\":\"" << digest.HexDigest() << "\",\"leaves\":[";
      TObjArray *leaves = from->GetListOfLeaves();
      for (Int_t k = 0; k < leaves->GetEntriesFast(); ++k)
         json << (k ? "," : "") << LeafJson(static_cast<TLeaf *>(leaves->At(k)));
      json << "]}";
   }
   json << "]}";
   copy->SetEntries(in->GetEntries());
   if (copy->Write() <= 0)
      throw std::runtime_error(std::string("writing ") + in->GetName() + " to " + out->GetName() + " failed");
   delete copy;
   return json.str();
}

// The classes' descriptions (TStreamerInfo) of SOURCE written to OUT too: objects copied as bytes need them.
void CopyStreamerInfos(TFile *source, TFile *out)
{
   TList *infos = source->GetStreamerInfoList();
   if (!infos)
      return;
   for (auto *object : *infos) {
      auto *info = dynamic_cast<TStreamerInfo *>(object);
      if (!info)
         continue;
      TClass *cls = TClass::GetClass(info->GetName());
      auto *known = cls ? cls->GetStreamerInfo(info->GetClassVersion()) : nullptr;
      if (!known)
         throw std::runtime_error(std::string(source->GetName()) + ": ROOT has no description of class " +
                                  info->GetName() + " version " + std::to_string(info->GetClassVersion()));
      known->ForceWriteInfo(out, kTRUE);
   }
   delete infos;
}

// SOURCE_PATH copied to COPY_PATH with SETTING; returns the manifest (one line of JSON).
std::string Run(const char *source_path, const char *copy_path, int setting)
{
   gClock = Clock{};
   std::unique_ptr<TFile> source(TFile::Open(source_path, "READ"));
   if (!source || source->IsZombie())
      throw std::runtime_error(std::string(source_path) + ": ROOT cannot open it");
   std::vector<TKey *> plan;
   for (auto *object : *source->GetListOfKeys()) {
      auto *key = static_cast<TKey *>(object);
      if (source->GetKey(key->GetName()) != key)
         continue;  // an older cycle
      const std::string cls = key->GetClassName();
      if (cls == "TTree")
         Classify(source->Get<TTree>(key->GetName()));
      else if (cls == "TDirectoryFile" || cls == "TDirectory" || cls.rfind("ROOT::", 0) == 0)
         throw Unsupported(std::string(key->GetName()) + " is a " + cls);
      plan.push_back(key);
   }
   std::unique_ptr<TFile> out(TFile::Open(copy_path, "RECREATE", "", setting));
   if (!out || out->IsZombie())
      throw std::runtime_error(std::string(copy_path) + ": ROOT cannot create it");
   CopyStreamerInfos(source.get(), out.get());
   std::ostringstream manifest;
   manifest << "{\"setting\":" << setting << ",\"keys\":{";
   const char *comma = "";
   for (auto *key : plan) {
      manifest << comma << Quoted(key->GetName()) << ":";
      comma = ",";
      if (std::string(key->GetClassName()) == "TTree") {
         manifest << TranscodeTree(source->Get<TTree>(key->GetName()), out.get(), setting);
      } else {
         new ObjectKey(out.get(), key, setting);  // owned by the copy's directory from now on
         manifest << "{\"kind\":\"object\"}";
      }
   }
   gClock.Lap(gClock.other);
   manifest << "},\"seconds\":{\"read\":" << gClock.read << ",\"inflate\":" << gClock.inflate
            << ",\"hash\":" << gClock.hash << ",\"deflate\":" << gClock.deflate << ",\"other\":" << gClock.other
            << "},\"baskets\":" << gClock.baskets
            << ",\"payload_bytes\":" << gClock.payload << ",\"zipped_bytes\":" << gClock.zipped << "}";
   out->Close();
   if (out->GetBytesWritten() <= 0)
      throw std::runtime_error(std::string("writing ") + copy_path + " failed");
   return manifest.str();
}

// One request ("SOURCE<TAB>COPY<TAB>SETTING") answered: the manifest, or {"unsupported"|"error": why} with the copy
// removed.
std::string Answer(const std::string &request)
{
   const size_t first = request.find('\t'), second = request.find('\t', first + 1);
   if (first == std::string::npos || second == std::string::npos)
      return "{\"error\":" + Quoted("a request is SOURCE<TAB>COPY<TAB>SETTING, not: " + request) + "}";
   const std::string source = request.substr(0, first), copy = request.substr(first + 1, second - first - 1);
   try {
      return Run(source.c_str(), copy.c_str(), std::stoi(request.substr(second + 1)));
   } catch (const Unsupported &e) {
      std::remove(copy.c_str());
      return "{\"unsupported\":" + Quoted(e.what()) + "}";
   } catch (const std::exception &e) {
      std::remove(copy.c_str());
      return "{\"error\":" + Quoted(source + ": " + e.what()) + "}";
   }
}

} // namespace

int main(int argc, char **argv)
{
   if (argc != 1) {
      std::fprintf(stderr, "usage: %s < requests (one per line: SOURCE<TAB>COPY<TAB>SETTING)\n", argv[0]);
      return 2;
   }
   gErrorIgnoreLevel = kError;
   std::string request;
   for (int c; (c = std::getchar()) != EOF;) {
      if (c != '\n') {
         request += static_cast<char>(c);
         continue;
      }
      const std::string answer = Answer(request) + "\n";
      request.clear();
      if (std::fputs(answer.c_str(), stdout) == EOF || std::fflush(stdout) != 0)
         return 1;  // nobody reads the answers any more
   }
   return 0;
}
