// Streaming (SAX) read of tokenizer.json: model.vocab and model.merges (128k + 280k entries in
// Llama-3) go straight into flat vectors, everything else into a small DOM. A full nlohmann DOM of
// the real file costs ~0.5 s in std::map nodes alone; this keeps loading well under that.
#include <fmt/format.h>

#include "engine/tokenizer_internal.h"

namespace kernelllm::tok {
namespace {

class Reader : public nlohmann::json_sax<Json> {
 public:
  explicit Reader(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(Json(nullptr)); }
  bool boolean(bool v) override { return value(Json(v)); }
  bool number_integer(number_integer_t v) override { return mode_ == Mode::vocab ? vocab_id(v) : value(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::vocab) return vocab_id(static_cast<int64_t>(std::min<number_unsigned_t>(v, INT64_MAX)));
    return value(Json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(Json(v)); }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }

  bool string(string_t& v) override {
    if (mode_ == Mode::merges) return merge_string(v);
    if (mode_ == Mode::merge_pair) {
      if (pair_.size() >= 2) return fail(fmt::format("model.merges[{}]: expected a pair of strings", merge_index()));
      pair_.push_back(std::move(v));
      return true;
    }
    if (mode_ == Mode::vocab) return fail(fmt::format("model.vocab[{}]: expected an integer id, found a string", key_));
    return value(Json(std::move(v)));
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::vocab) {
      key_ = std::move(k);
      return true;
    }
    frames_.back().key = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::dom) return fail(bulk_shape_error("an object"));
    if (at_model_key("vocab")) {
      mode_ = Mode::vocab;
      out_.vocab.emplace();
      return true;
    }
    return open(Json::object());
  }

  bool end_object() override {
    if (mode_ == Mode::vocab) {
      mode_ = Mode::dom;
      return true;
    }
    frames_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::merges) {
      mode_ = Mode::merge_pair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::dom) return fail(bulk_shape_error("an array"));
    if (at_model_key("merges")) {
      mode_ = Mode::merges;
      out_.merges.emplace();
      return true;
    }
    return open(Json::array());
  }

  bool end_array() override {
    if (mode_ == Mode::merge_pair) {
      if (pair_.size() != 2) return fail(fmt::format("model.merges[{}]: expected a pair of strings", merge_index()));
      out_.merges->emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::dom;
      return true;
    }
    frames_.pop_back();
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last_token, const nlohmann::detail::exception& ex) override {
    return fail(fmt::format("invalid JSON at byte {} near '{}': {}", position, last_token.substr(0, 40), ex.what()));
  }

  const std::string& error_message() const { return error_; }

 private:
  enum class Mode { dom, vocab, merges, merge_pair };
  struct Frame {
    Json* node;
    std::string key;  // the object's current key (unused for arrays)
  };

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  size_t merge_index() const { return out_.merges ? out_.merges->size() : 0; }

  std::string bulk_shape_error(std::string_view found) const {
    if (mode_ == Mode::vocab) return fmt::format("model.vocab[{}]: expected an integer id, found {}", key_, found);
    return fmt::format("model.merges[{}]: expected a string or a pair of strings, found {}", merge_index(), found);
  }

  // True when the value about to start is root.model.<key>.
  bool at_model_key(std::string_view key) const {
    return frames_.size() == 2 && frames_[0].key == "model" && frames_[1].node->is_object() && frames_[1].key == key;
  }

  bool vocab_id(int64_t id) {
    out_.vocab->emplace_back(std::move(key_), id);
    return true;
  }

  bool merge_string(string_t& s) {
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
      return fail(fmt::format("model.merges[{}]: expected \"left right\", found \"{}\"", merge_index(), s));
    }
    out_.merges->emplace_back(s.substr(0, sp), s.substr(sp + 1));
    return true;
  }

  // Places a scalar (or, through open(), a container) where the parser is.
  Json* place(Json v) {
    if (frames_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    Frame& top = frames_.back();
    if (top.node->is_array()) {
      top.node->push_back(std::move(v));
      return &top.node->back();
    }
    Json& slot = (*top.node)[top.key];
    slot = std::move(v);
    return &slot;
  }

  bool value(Json v) {
    if (mode_ != Mode::dom) return fail(bulk_shape_error(json_type_name(v)));
    place(std::move(v));
    return true;
  }

  bool open(Json container) {
    frames_.push_back({place(std::move(container)), {}});
    return true;
  }

  TokenizerJson& out_;
  std::vector<Frame> frames_;
  Mode mode_ = Mode::dom;
  std::string key_;                // current vocab key
  std::vector<std::string> pair_;  // current ["a", "b"] merge
  std::string error_;
};

}  // namespace

Result<TokenizerJson> read_tokenizer_json(std::string_view text) {
  TokenizerJson out;
  Reader reader(out);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &reader);
  } catch (const std::exception& e) {
    return error(ErrorCode::parse_error, fmt::format("tokenizer.json: {}", e.what()));
  }
  if (!ok) {
    const std::string& msg = reader.error_message();
    return error(ErrorCode::parse_error, "tokenizer.json: " + (msg.empty() ? std::string("invalid JSON") : msg));
  }
  return out;
}

}  // namespace kernelllm::tok
