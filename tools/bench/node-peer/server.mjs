// The Node.js peer for the intake benchmark, written the way a user would:
// node:http, @octokit/webhooks to verify X-Hub-Signature-256, JSON.parse to
// reject non-JSON, kafkajs to produce with acks=-1 (all in-sync replicas),
// 202 only after the broker acknowledged. Same topic, same key choice.
//   node server.mjs PORT_FILE BOOTSTRAP SECRET TOPIC
import { createServer } from "node:http";
import { writeFileSync } from "node:fs";
import { Webhooks } from "@octokit/webhooks";
import { Kafka, logLevel } from "kafkajs";

const [portFile, bootstrap, secret, topic] = process.argv.slice(2);
const webhooks = new Webhooks({ secret });
const kafka = new Kafka({ clientId: "node-peer", brokers: bootstrap.split(","), logLevel: logLevel.ERROR });
const producer = kafka.producer({ allowAutoTopicCreation: false });
await producer.connect();

const reply = (res, status, body) => {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
};

const server = createServer((req, res) => {
  if (req.method !== "POST" || req.url !== "/github/webhook") return reply(res, 404, { error: "not found" });
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const signature = req.headers["x-hub-signature-256"];
    const event = req.headers["x-github-event"];
    const delivery = req.headers["x-github-delivery"];
    try {
      if (!signature || !(await webhooks.verify(body, signature))) return reply(res, 401, { error: "bad signature" });
    } catch {
      return reply(res, 401, { error: "bad signature" });
    }
    if (!event || !delivery) return reply(res, 400, { error: "missing headers" });
    let payload;
    try {
      payload = JSON.parse(body);
    } catch {
      return reply(res, 400, { error: "not json" });
    }
    try {
      await producer.send({
        topic,
        acks: -1,
        messages: [{
          key: payload?.repository?.full_name ?? delivery,
          value: body,
          headers: { "relay-delivery-id": delivery, "relay-event": event },
        }],
      });
      reply(res, 202, { status: "accepted", delivery_id: delivery });
    } catch (e) {
      reply(res, 503, { error: String(e) });
    }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => writeFileSync(portFile, `${server.address().port}\n`));
const stop = async () => { server.close(); await producer.disconnect(); process.exit(0); };
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
