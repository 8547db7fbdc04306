#!/usr/bin/env bash
# Regenerates the test certificates (valid for 100 years, EC P-256): a job CA,
# a certificate it signs for 127.0.0.1/localhost (coordinator and members
# alike), and a stranger CA with its own certificate. For tests only.
set -euo pipefail
cd "$(dirname "$0")"
days=36500
for ca in ca stranger_ca; do
  openssl ecparam -name prime256v1 -genkey -noout -out $ca.key
  openssl req -x509 -new -key $ca.key -days $days -subj "/CN=gradsync test $ca" -out $ca.pem
done
for pair in "job ca" "stranger stranger_ca"; do
  set -- $pair
  openssl ecparam -name prime256v1 -genkey -noout -out $1.key
  openssl req -new -key $1.key -subj "/CN=gradsync test $1" -out $1.csr
  printf "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n" > $1.ext
  openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -days $days \
    -extfile $1.ext -out $1.pem
  rm -f $1.csr $1.ext
done
rm -f *.srl ca.key stranger_ca.key
