//===- TrainOptimizerOps.cpp - Optimizer updates --------------------------===//
//
// Syntax and verifier of train.adamw_update: the member list of a shard
// group's fused optimizer update and the invariants its lowering relies on.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::mantissa::train;

using Member = AdamWUpdateOp::Member;
using MasterKind = AdamWUpdateOp::MasterKind;

//===----------------------------------------------------------------------===//
// Member encoding
//===----------------------------------------------------------------------===//
//
// A member is stored as a dictionary, so that the generic form stays readable:
//   {name = "w", count = 4099 : i64, grad = #train.dtype<bf16>,
//    grad_offset = 0 : i64, param = ..., param_offset = ...,
//    master = "fp32" | "remainder" (absent: none), master_offset = ...,
//    moments = ..., moments_offset = ...}

static StringRef getMasterKeyword(MasterKind kind) {
  switch (kind) {
  case MasterKind::None:
    return "none";
  case MasterKind::FP32:
    return "fp32";
  case MasterKind::Remainder:
    return "remainder";
  }
  llvm_unreachable("unknown master kind");
}

ArrayAttr AdamWUpdateOp::buildMembersAttr(MLIRContext *context,
                                          ArrayRef<Member> members) {
  Builder builder(context);
  SmallVector<Attribute> list;
  for (const Member &member : members) {
    SmallVector<NamedAttribute> fields;
    auto addInt = [&](StringRef key, int64_t value) {
      fields.push_back(
          builder.getNamedAttr(key, builder.getI64IntegerAttr(value)));
    };
    auto addDType = [&](StringRef key, DType dtype) {
      fields.push_back(
          builder.getNamedAttr(key, DTypeAttr::get(context, dtype)));
    };
    fields.push_back(
        builder.getNamedAttr("name", builder.getStringAttr(member.name)));
    addInt("count", member.count);
    addDType("grad", member.grad);
    addInt("grad_offset", member.gradOffset);
    addDType("param", member.param);
    addInt("param_offset", member.paramOffset);
    if (member.master != MasterKind::None) {
      fields.push_back(builder.getNamedAttr(
          "master", builder.getStringAttr(getMasterKeyword(member.master))));
      addInt("master_offset", member.masterOffset);
    }
    addDType("moments", member.moments);
    addInt("moments_offset", member.momentsOffset);
    list.push_back(builder.getDictionaryAttr(fields));
  }
  return builder.getArrayAttr(list);
}

std::optional<Member> AdamWUpdateOp::decodeMember(Attribute attr,
                                                  std::string &error) {
  auto dict = dyn_cast<DictionaryAttr>(attr);
  if (!dict) {
    error = "is not a dictionary";
    return std::nullopt;
  }
  Member member;
  auto name = dict.getAs<StringAttr>("name");
  if (!name) {
    error = "has no 'name' string";
    return std::nullopt;
  }
  member.name = name.str();
  auto getInt = [&](StringRef key, int64_t &value) {
    auto integer = dict.getAs<IntegerAttr>(key);
    if (!integer) {
      error = ("has no integer '" + key + "'").str();
      return false;
    }
    value = integer.getInt();
    return true;
  };
  auto getDType = [&](StringRef key, DType &dtype) {
    auto dtypeAttr = dict.getAs<DTypeAttr>(key);
    if (!dtypeAttr) {
      error = ("has no dtype '" + key + "'").str();
      return false;
    }
    dtype = dtypeAttr.getValue();
    return true;
  };
  if (!getInt("count", member.count) || !getDType("grad", member.grad) ||
      !getInt("grad_offset", member.gradOffset) ||
      !getDType("param", member.param) ||
      !getInt("param_offset", member.paramOffset) ||
      !getDType("moments", member.moments) ||
      !getInt("moments_offset", member.momentsOffset))
    return std::nullopt;
  if (Attribute master = dict.get("master")) {
    auto keyword = dyn_cast<StringAttr>(master);
    if (keyword && keyword.getValue() == "fp32")
      member.master = MasterKind::FP32;
    else if (keyword && keyword.getValue() == "remainder")
      member.master = MasterKind::Remainder;
    else {
      error = "has a 'master' that is neither \"fp32\" nor \"remainder\"";
      return std::nullopt;
    }
    if (!getInt("master_offset", member.masterOffset))
      return std::nullopt;
  }
  return member;
}

SmallVector<Member> AdamWUpdateOp::getMemberList() {
  SmallVector<Member> members;
  std::string error;
  for (Attribute attr : getMembers())
    if (std::optional<Member> member = decodeMember(attr, error))
      members.push_back(std::move(*member));
  return members;
}

//===----------------------------------------------------------------------===//
// Custom assembly
//===----------------------------------------------------------------------===//
//
//   [ "name" COUNT {grad = DT at OFF, param = DT at OFF,
//                   (master = (fp32|remainder) at OFF,)? moments = DT at OFF},
//     ... ]

ParseResult AdamWUpdateOp::parseAdamWMembers(OpAsmParser &parser,
                                             ArrayAttr &membersAttr) {
  SmallVector<Member> members;
  auto parseMember = [&]() -> ParseResult {
    Member member;
    std::string name;
    if (parser.parseString(&name) || parser.parseInteger(member.count) ||
        parser.parseLBrace())
      return failure();
    member.name = name;
    bool seen[4] = {false, false, false, false};
    auto parseField = [&]() -> ParseResult {
      SMLoc loc = parser.getCurrentLocation();
      StringRef key;
      if (parser.parseKeyword(&key) || parser.parseEqual())
        return failure();
      int index = llvm::StringSwitch<int>(key)
                      .Case("grad", 0)
                      .Case("param", 1)
                      .Case("master", 2)
                      .Case("moments", 3)
                      .Default(-1);
      if (index < 0)
        return parser.emitError(loc)
               << "expected 'grad', 'param', 'master' or 'moments', got '"
               << key << "'";
      if (seen[index])
        return parser.emitError(loc) << "'" << key << "' given twice";
      seen[index] = true;
      int64_t offset = 0;
      if (index == 2) {
        SMLoc kindLoc = parser.getCurrentLocation();
        StringRef kind;
        if (parser.parseKeyword(&kind))
          return failure();
        if (kind == "fp32")
          member.master = MasterKind::FP32;
        else if (kind == "remainder")
          member.master = MasterKind::Remainder;
        else
          return parser.emitError(kindLoc)
                 << "expected master 'fp32' or 'remainder', got '" << kind
                 << "'";
        if (parser.parseKeyword("at") || parser.parseInteger(offset))
          return failure();
        member.masterOffset = offset;
        return success();
      }
      DType dtype;
      if (parseDTypeKeyword(static_cast<AsmParser &>(parser), dtype) ||
          parser.parseKeyword("at") || parser.parseInteger(offset))
        return failure();
      if (index == 0) {
        member.grad = dtype;
        member.gradOffset = offset;
      } else if (index == 1) {
        member.param = dtype;
        member.paramOffset = offset;
      } else {
        member.moments = dtype;
        member.momentsOffset = offset;
      }
      return success();
    };
    SMLoc fieldsLoc = parser.getCurrentLocation();
    if (parser.parseCommaSeparatedList(parseField) || parser.parseRBrace())
      return failure();
    if (!seen[0] || !seen[1] || !seen[3])
      return parser.emitError(fieldsLoc)
             << "member '" << member.name
             << "' needs 'grad', 'param' and 'moments'";
    members.push_back(std::move(member));
    return success();
  };
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square,
                                     parseMember))
    return failure();
  membersAttr = buildMembersAttr(parser.getContext(), members);
  return success();
}

void AdamWUpdateOp::printAdamWMembers(OpAsmPrinter &printer, Operation *op,
                                      ArrayAttr membersAttr) {
  // Members that do not decode (only possible in the generic form of an op
  // that fails verification) are printed as their raw attribute.
  printer << "[";
  llvm::interleave(
      membersAttr, printer,
      [&](Attribute attr) {
        std::string error;
        std::optional<Member> member = decodeMember(attr, error);
        if (!member) {
          printer.printAttribute(attr);
          return;
        }
        printer << "\n      ";
        printer.printString(member->name);
        printer << " " << member->count << " {grad = ";
        printDTypeKeyword(static_cast<AsmPrinter &>(printer), member->grad);
        printer << " at " << member->gradOffset << ", param = ";
        printDTypeKeyword(static_cast<AsmPrinter &>(printer), member->param);
        printer << " at " << member->paramOffset;
        if (member->master != MasterKind::None)
          printer << ", master = " << getMasterKeyword(member->master) << " at "
                  << member->masterOffset;
        printer << ", moments = ";
        printDTypeKeyword(static_cast<AsmPrinter &>(printer), member->moments);
        printer << " at " << member->momentsOffset << "}";
      },
      ",");
  printer << "]";
}

//===----------------------------------------------------------------------===//
// Verifier
//===----------------------------------------------------------------------===//

namespace {
/// A byte range one member occupies in one buffer.
struct Extent {
  int64_t begin;
  int64_t end;
  unsigned member;
};
} // namespace

LogicalResult AdamWUpdateOp::verify() {
  ArrayAttr membersAttr = getMembers();
  if (membersAttr.empty())
    return emitOpError() << "has no members";

  SmallVector<Member> members;
  for (auto [index, attr] : llvm::enumerate(membersAttr)) {
    std::string error;
    std::optional<Member> member = decodeMember(attr, error);
    if (!member)
      return emitOpError() << "member #" << index << " " << error;
    members.push_back(std::move(*member));
  }

  bool anyMaster = false;
  for (const Member &member : members) {
    auto error = [&]() {
      return emitOpError() << "member '" << member.name << "' ";
    };
    if (member.count <= 0)
      return error() << "has " << member.count
                     << " elements; a member needs at least one";
    for (auto [buffer, offset] :
         {std::pair<StringRef, int64_t>{"grad", member.gradOffset},
          {"param", member.paramOffset},
          {"master", member.masterOffset},
          {"moments", member.momentsOffset}}) {
      if (offset < 0 || offset % kMemberAlignment != 0)
        return error() << "has " << buffer << " offset " << offset
                       << ", which is not a non-negative multiple of "
                       << kMemberAlignment << " bytes";
    }
    switch (member.master) {
    case MasterKind::None:
      if (member.moments != member.param)
        return error() << "keeps its moments in "
                       << stringifyDType(member.moments)
                       << " but has no master: without a master the "
                          "optimizer state is in the parameter's dtype ("
                       << stringifyDType(member.param) << ")";
      if (member.param != DType::fp32 && member.grad != member.param)
        return error() << "has a " << stringifyDType(member.param)
                       << " parameter without master and a "
                       << stringifyDType(member.grad)
                       << " gradient; they must match";
      break;
    case MasterKind::FP32:
      anyMaster = true;
      if (member.param == DType::fp32)
        return error() << "has an fp32 master for an fp32 parameter; an fp32 "
                          "parameter is its own master";
      if (member.moments != DType::fp32)
        return error() << "has an fp32 master but "
                       << stringifyDType(member.moments)
                       << " moments; the moments of a master are fp32";
      break;
    case MasterKind::Remainder:
      anyMaster = true;
      if (member.param != DType::bf16)
        return error() << "has a remainder master but a "
                       << stringifyDType(member.param)
                       << " parameter; remainders complete bf16 parameters";
      if (member.moments != DType::fp32)
        return error() << "has a remainder master but "
                       << stringifyDType(member.moments)
                       << " moments; the moments of a master are fp32";
      break;
    }
  }

  if (anyMaster && !getMaster())
    return emitOpError() << "has members with masters but no master buffer";
  if (!anyMaster && getMaster())
    return emitOpError() << "has a master buffer but no member has a master";
  if (getAmsgrad() && !getMaxExpAvgSq())
    return emitOpError() << "with amsgrad needs a max_exp_avg_sq buffer";
  if (!getAmsgrad() && getMaxExpAvgSq())
    return emitOpError()
           << "has a max_exp_avg_sq buffer but amsgrad is not set";
  if (static_cast<bool>(getPart()) != static_cast<bool>(getParts()))
    return emitOpError() << "needs both the part and the number of parts";

  // Every member must lie inside each (static) buffer and must not overlap
  // another member there.
  auto checkBuffer = [&](StringRef name, Value buffer,
                         auto extentOf) -> LogicalResult {
    if (!buffer)
      return success();
    SmallVector<Extent> extents;
    for (auto [index, member] : llvm::enumerate(members))
      if (std::optional<std::pair<int64_t, int64_t>> range = extentOf(member))
        extents.push_back({range->first, range->second, (unsigned)index});
    auto type = cast<MemRefType>(buffer.getType());
    if (type.hasStaticShape()) {
      int64_t size = type.getDimSize(0);
      for (const Extent &extent : extents)
        if (extent.end > size)
          return emitOpError()
                 << "member '" << members[extent.member].name << "' needs "
                 << name << " bytes [" << extent.begin << ", " << extent.end
                 << ") but the " << name << " buffer has " << size << " bytes";
    }
    llvm::sort(extents, [](const Extent &a, const Extent &b) {
      return a.begin < b.begin;
    });
    for (size_t i = 1; i < extents.size(); ++i)
      if (extents[i].begin < extents[i - 1].end)
        return emitOpError()
               << "members '" << members[extents[i - 1].member].name
               << "' and '" << members[extents[i].member].name
               << "' overlap in the " << name << " buffer (bytes ["
               << extents[i - 1].begin << ", " << extents[i - 1].end
               << ") and [" << extents[i].begin << ", " << extents[i].end
               << "))";
    return success();
  };
  using Range = std::optional<std::pair<int64_t, int64_t>>;
  auto range = [](int64_t offset, int64_t count, unsigned width) -> Range {
    return std::make_pair(offset, offset + count * (int64_t)width);
  };
  if (failed(checkBuffer("grad", getGrad(),
                         [&](const Member &m) {
                           return range(m.gradOffset, m.count,
                                        getByteWidth(m.grad));
                         })) ||
      failed(checkBuffer("param", getParam(),
                         [&](const Member &m) {
                           return range(m.paramOffset, m.count,
                                        getByteWidth(m.param));
                         })) ||
      failed(checkBuffer("master", getMaster(), [&](const Member &m) -> Range {
        if (m.master == MasterKind::None)
          return std::nullopt;
        return range(m.masterOffset, m.count, m.getMasterByteWidth());
      })))
    return failure();
  for (auto [name, buffer] :
       {std::pair<StringRef, Value>{"exp_avg", getExpAvg()},
        {"exp_avg_sq", getExpAvgSq()},
        {"max_exp_avg_sq", getMaxExpAvgSq()}})
    if (failed(checkBuffer(name, buffer, [&](const Member &m) {
          return range(m.momentsOffset, m.count, getByteWidth(m.moments));
        })))
      return failure();
  return success();
}
