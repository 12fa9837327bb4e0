package logcat

// catalog holds every operator log message of the module, in English as
// the code writes it, with its event name and its Brazilian Portuguese
// text. An event name is never changed or reused once shipped: alerts and
// dashboards match on it. A message whose wording changes keeps its event
// name; one whose meaning changes gets a new name. The test in this
// package keeps the list exactly equal to the messages in the code.
var catalog = []Entry{
	// The node process (cmd/malachi serve).
	{"node started", "node.started", "nó iniciado"},
	{"shutting down: draining connections", "node.shutting_down", "encerrando: drenando as conexões"},
	{"closing the node with requests still waiting on storage", "node.shutdown_requests_outlived", "fechando o nó com requisições ainda à espera do armazenamento"},
	{"SIGHUP: TLS certificate reloaded", "node.sighup_tls_reloaded", "SIGHUP: certificado TLS recarregado"},
	{"SIGHUP: TLS reload failed; the previous certificate stays in use", "node.sighup_tls_reload_failed", "SIGHUP: falha ao recarregar o TLS; o certificado anterior continua em uso"},
	{"tracing on", "tracing.on", "rastreamento ativado"},
	{"tracing: the last spans were not all exported", "tracing.flush_incomplete", "rastreamento: nem todos os últimos spans foram exportados"},
	{"tracing: exporting spans failed", "tracing.export_failed", "rastreamento: falha ao exportar spans"},

	// Data directory and limits at start.
	{"data directory is open to group or others (AllowOpenPermissions is set); it holds the cursor key and password hashes", "datadir.open_permissions_allowed", "o diretório de dados está aberto ao grupo ou a outros (AllowOpenPermissions está ativo); ele guarda a chave de cursores e os hashes de senha"},
	{"data directory was open to group or others; removed their access", "datadir.permissions_tightened", "o diretório de dados estava aberto ao grupo ou a outros; o acesso deles foi removido"},
	{"the open-file limit is below what the range limit allows; raise it (ulimit -n) or lower MaxRanges", "datadir.open_file_limit_low", "o limite de arquivos abertos é menor do que o limite de faixas permite; aumente-o (ulimit -n) ou reduza MaxRanges"},

	// Client connections, TLS and subscriptions (internal/server).
	{"accept failed; retrying", "server.accept_failed", "falha ao aceitar uma conexão; tentando novamente"},
	{"TLS handshake failed", "server.tls_handshake_failed", "falha no handshake TLS"},
	{"TLS certificate is not valid now; clients will refuse it", "server.tls_certificate_not_valid", "o certificado TLS não é válido agora; os clientes vão recusá-lo"},
	{"TLS reload failed; keeping the previous certificate", "server.tls_reload_failed", "falha ao recarregar o TLS; o certificado anterior é mantido"},
	{"TLS certificate reloaded", "server.tls_reloaded", "certificado TLS recarregado"},
	{"subscription ended", "server.subscription_ended", "assinatura encerrada"},

	// The dashboard (internal/dashboard).
	{"dashboard: login could not reach the node", "dashboard.login_node_unreachable", "painel: o login não conseguiu falar com o nó"},
	{"dashboard: rendering a page failed", "dashboard.render_failed", "painel: falha ao renderizar uma página"},
	{"dashboard: call to the node failed", "dashboard.node_call_failed", "painel: falha na chamada ao nó"},
	{"the dashboard is served over plain HTTP on a non-loopback address: passwords and session cookies cross the network in the clear; put a TLS proxy in front and pass --dashboard-secure", "dashboard.plain_http_exposed", "o painel é servido por HTTP simples em um endereço que não é de loopback: senhas e cookies de sessão atravessam a rede sem criptografia; coloque um proxy TLS na frente e passe --dashboard-secure"},

	// Authentication and audit.
	{"login", "auth.login", "login"},
	{"login refused", "auth.login_refused", "login recusado"},
	{"login locked", "auth.login_locked", "login bloqueado"},
	{"token auth: fetching the JWKS failed; keeping the keys held", "auth.jwks_fetch_failed", "autenticação por token: falha ao buscar o JWKS; as chaves já obtidas são mantidas"},
	{"token auth: no keys to verify with (the JWKS URL could not be fetched)", "auth.jwks_no_keys", "autenticação por token: não há chaves para verificar (a URL do JWKS não pôde ser obtida)"},
	{"audit log write failed", "audit.write_failed", "falha ao gravar o log de auditoria"},

	// Segments: rolls, reconciliation at start, deletion.
	{"segment roll failed", "segment.roll_failed", "falha na rotação do segmento"},
	{"age roll failed", "segment.age_roll_failed", "falha na rotação por idade"},
	{"roll away from a full or failing disk failed", "segment.disk_roll_failed", "falha na rotação para sair de um disco cheio ou com falha"},
	{"finished an interrupted roll from the store's seal", "segment.roll_finished_from_seal", "rotação interrompida concluída a partir do selo do armazenamento"},
	{"created the file of an active segment registered before an interruption", "segment.active_file_created", "criado o arquivo de um segmento ativo registrado antes de uma interrupção"},
	{"a segment file did not match the metadata; it was quarantined, not adopted", "segment.file_quarantined", "um arquivo de segmento não correspondia aos metadados; foi posto em quarentena, não adotado"},
	{"a damaged active segment was sealed past its last valid batch; its bytes are kept, reads stop at the damage", "segment.damaged_active_sealed", "um segmento ativo danificado foi selado após seu último lote válido; seus bytes são mantidos e as leituras param no dano"},
	{"a segment file's id is beyond any id the node hands out; kept and ignored", "segment.id_out_of_range", "o id de um arquivo de segmento está além de qualquer id que o nó atribui; mantido e ignorado"},
	{"a range could not be reconciled; it refuses writes", "segment.range_unreconciled", "uma faixa não pôde ser reconciliada; ela recusa gravações"},
	{"segments on disk that no topic references were kept, not deleted", "segment.orphans_kept", "segmentos em disco que nenhum tópico referencia foram mantidos, não excluídos"},
	{"a sealed segment is missing from the store; reads of it will fail", "segment.sealed_missing", "um segmento selado está ausente do armazenamento; as leituras dele vão falhar"},
	{"a sealed segment is damaged; it is kept and reads of it will fail", "segment.sealed_damaged", "um segmento selado está danificado; ele é mantido e as leituras dele vão falhar"},
	{"a sealed segment's file did not match the metadata; it was quarantined, not served", "segment.sealed_quarantined", "o arquivo de um segmento selado não correspondia aos metadados; foi posto em quarentena, não servido"},
	{"deleted the file of a segment the metadata deleted", "segment.file_deleted", "excluído o arquivo de um segmento que os metadados excluíram"},
	{"deleting a deleted segment's file failed", "segment.file_delete_failed", "falha ao excluir o arquivo de um segmento excluído"},
	{"deleting a deleted segment's file failed; kept", "segment.file_delete_failed_kept", "falha ao excluir o arquivo de um segmento excluído; ele é mantido"},
	{"deleting a deleted topic's segment failed", "segment.topic_delete_failed", "falha ao excluir um segmento de um tópico excluído"},
	{"fence before delete failed", "segment.fence_before_delete_failed", "falha ao isolar (fence) o segmento antes da exclusão"},
	{"fence of a deleted topic's segment failed", "segment.topic_fence_failed", "falha ao isolar (fence) um segmento de um tópico excluído"},
	{"fence of a deleted range's segment failed", "segment.range_fence_failed", "falha ao isolar (fence) um segmento de uma faixa excluída"},
	{"segment disk state changed", "disk.state_changed", "o estado do disco de segmentos mudou"},
	{"cannot publish the disk state in gossip", "disk.state_publish_failed", "não é possível publicar o estado do disco no gossip"},

	// Splits and merges.
	{"automatic reshard", "reshard.automatic", "redivisão automática"},
	{"automatic reshard refused", "reshard.automatic_refused", "redivisão automática recusada"},
	{"releasing a range held for a split or merge failed; it runs out on its own", "reshard.hold_release_failed", "falha ao liberar uma faixa retida para uma divisão ou fusão; a retenção expira sozinha"},

	// Retention.
	{"retention: deleted an expired segment", "retention.segment_deleted", "retenção: excluído um segmento expirado"},
	{"retention: a segment was not deleted; the next sweep looks again", "retention.segment_not_deleted", "retenção: um segmento não foi excluído; a próxima varredura verifica de novo"},
	{"retention: the policies could not be confirmed; the sweep waits for the next interval", "retention.policies_unconfirmed", "retenção: as políticas não puderam ser confirmadas; a varredura espera o próximo intervalo"},

	// Cluster membership as the broker sees it.
	{"cluster: joined", "cluster.joined", "cluster: entrou no cluster"},
	{"cluster: waiting for a member to answer gossip", "cluster.waiting_for_gossip", "cluster: aguardando um membro responder ao gossip"},
	{"cluster: could not gossip in at start; retrying in the background", "cluster.gossip_join_retrying", "cluster: não foi possível entrar pelo gossip na partida; tentando novamente em segundo plano"},
	{"cluster: gossip refused this node", "cluster.gossip_refused", "cluster: o gossip recusou este nó"},
	{"cluster: the cluster refused this node", "cluster.refused", "cluster: o cluster recusou este nó"},
	{"cluster: no member answered; starting from the local metadata and retrying the join", "cluster.join_retrying", "cluster: nenhum membro respondeu; iniciando a partir dos metadados locais e tentando entrar de novo"},
	{"cluster: starting from the local metadata, which may be behind", "cluster.local_metadata_start", "cluster: iniciando a partir dos metadados locais, que podem estar atrasados"},
	{"cluster: publishing the cluster id in gossip", "cluster.id_publish_failed", "cluster: falha ao publicar o id do cluster no gossip"},
	{"cluster: another node claims this node's id", "cluster.node_id_conflict", "cluster: outro nó reivindica o id deste nó"},
	{"cluster: gossip leave", "cluster.gossip_leave_failed", "cluster: falha ao sair do gossip"},
	{"cluster: a bad data notification", "cluster.bad_data_notification", "cluster: uma notificação de dados inválida"},
	{"cluster: an interest call named more topics than one call may; the rest are ignored", "cluster.interest_call_too_many_topics", "cluster: uma chamada de interesse citou mais tópicos do que uma chamada permite; os demais são ignorados"},
	{"cluster: the interest table is full; those readers wake on renewals only", "cluster.interest_table_full", "cluster: a tabela de interesses está cheia; esses leitores só acordam nas renovações"},

	// Replicas and failover (internal/broker).
	{"a segment's replicas span fewer failure domains than its policy asks", "replication.too_few_failure_domains", "as réplicas de um segmento abrangem menos domínios de falha do que sua política exige"},
	{"a copy of a sealed segment is behind its seal; it stays unsealed until healed", "replication.copy_behind_seal", "uma cópia de um segmento selado está atrás do seu selo; ela continua sem selo até ser reparada"},
	{"sealing a copy of a sealed segment failed", "replication.copy_seal_failed", "falha ao selar uma cópia de um segmento selado"},
	{"failed over a range whose primary is lost", "failover.range", "failover feito em uma faixa cuja primária foi perdida"},
	{"failed over a segment whose primary was lost", "failover.segment", "failover feito em um segmento cuja primária foi perdida"},
	{"failing over a range whose primary is lost did not finish", "failover.range_unfinished", "o failover de uma faixa cuja primária foi perdida não terminou"},
	{"a failed failover's hold is left to run out on its own", "failover.hold_left", "a retenção de um failover que falhou é deixada expirar sozinha"},
	{"opening a range's successor after a failover did not finish; the next produce opens it", "failover.successor_open_unfinished", "a abertura da sucessora de uma faixa após um failover não terminou; a próxima produção a abre"},
	{"recording a failed-over segment's content failed", "failover.seal_content_record_failed", "falha ao registrar o conteúdo de um segmento após o failover"},
	{"a stalled range is not ready yet; the next sweep tries again", "failover.range_not_ready", "uma faixa parada ainda não está pronta; a próxima varredura tenta de novo"},
	{"rolled an active segment off a lost follower", "roll.lost_follower", "um segmento ativo foi rotacionado para longe de uma seguidora perdida"},
	{"rolling an active segment off a lost follower did not finish; the next sweep tries again", "roll.lost_follower_unfinished", "a rotação de um segmento ativo para longe de uma seguidora perdida não terminou; a próxima varredura tenta de novo"},
	{"opening a range's successor after a roll off a lost follower did not finish; the next produce opens it", "roll.lost_follower_successor_open_unfinished", "a abertura da sucessora de uma faixa após uma rotação para longe de uma seguidora perdida não terminou; a próxima produção a abre"},
	{"an active segment with a lost follower keeps its replicas: no successor can be placed", "roll.lost_follower_unplaceable", "um segmento ativo com uma seguidora perdida mantém suas réplicas: nenhuma sucessora pode ser posicionada"},
	{"a failover led by the segment's own primary sealed at its commit watermark, below the copies' end", "failover.sealed_at_watermark", "um failover conduzido pela própria primária do segmento selou na sua marca de commit, abaixo do fim das cópias"},

	// Healing: rebuilding lost and damaged copies.
	{"heal: planning failed", "heal.planning_failed", "reparo: falha no planejamento"},
	{"heal: a verified copy was recorded", "heal.copy_recorded", "reparo: uma cópia verificada foi registrada"},
	{"heal: could not create a copy", "heal.copy_create_failed", "reparo: não foi possível criar uma cópia"},
	{"heal: copying a sealed segment failed; the next pass plans it again", "heal.copy_failed", "reparo: falha ao copiar um segmento selado; a próxima passagem o planeja de novo"},
	{"heal: recording a copy got no answer; the copy is kept until the metadata shows it", "heal.record_unanswered", "reparo: o registro de uma cópia não teve resposta; a cópia é mantida até os metadados a mostrarem"},
	{"heal: a copy that was not recorded is kept, since the list still names this node", "heal.unrecorded_copy_kept", "reparo: uma cópia não registrada é mantida, pois a lista ainda cita este nó"},
	{"heal: could not delete an unrecorded copy", "heal.unrecorded_copy_delete_failed", "reparo: não foi possível excluir uma cópia não registrada"},
	{"heal: dropped copies from a segment's list", "heal.copies_dropped", "reparo: cópias removidas da lista de um segmento"},
	{"heal: dropping dead or damaged copies from a segment's list failed; the next pass retries", "heal.copies_drop_failed", "reparo: falha ao remover cópias mortas ou danificadas da lista de um segmento; a próxima passagem tenta de novo"},
	{"heal: a damaged copy was set aside to be rebuilt; its file is kept, never served", "heal.damaged_copy_set_aside", "reparo: uma cópia danificada foi separada para ser reconstruída; seu arquivo é mantido e nunca servido"},
	{"heal: could not set a damaged copy aside; it is not rebuilt", "heal.damaged_copy_set_aside_failed", "reparo: não foi possível separar uma cópia danificada; ela não é reconstruída"},
	{"heal: left a segment's list to clear its damage mark; the rebuilt copy is added next", "heal.left_list_for_rebuild", "reparo: saiu da lista de um segmento para limpar sua marca de dano; a cópia reconstruída é adicionada em seguida"},
	{"heal: every holder of a sealed segment was removed and no node holds a copy; readers skip its records", "heal.segment_lost", "reparo: todos os detentores de um segmento selado foram removidos e nenhum nó guarda uma cópia; os leitores pulam seus registros"},
	{"heal: could not set aside a copy of a segment recorded lost; the file is kept in place", "heal.lost_copy_quarantine_failed", "reparo: não foi possível pôr de lado uma cópia de um segmento registrado como perdido; o arquivo fica onde está"},
	{"heal: a segment recorded lost has a copy here; it was moved into the quarantine, not deleted", "heal.lost_copy_quarantined", "reparo: um segmento registrado como perdido tem uma cópia aqui; ela foi movida para a quarentena, não apagada"},
	{"heal: recording a lost segment failed; the next pass retries", "heal.segment_lost_record_failed", "reparo: falha ao registrar um segmento perdido; a próxima passagem tenta de novo"},
	{"heal: deleted a copy the metadata no longer lists", "heal.unlisted_copy_deleted", "reparo: excluída uma cópia que os metadados não listam mais"},
	{"heal: could not delete a copy the metadata no longer lists", "heal.unlisted_copy_delete_failed", "reparo: não foi possível excluir uma cópia que os metadados não listam mais"},

	// Scrub: verifying sealed copies.
	{"scrub: not started", "scrub.not_started", "verificação: não iniciada"},
	{"scrub: too many copies to track", "scrub.too_many_copies", "verificação: cópias demais para acompanhar"},
	{"scrub: a sealed copy is damaged or missing; it is no longer served and will be replaced from a healthy replica", "scrub.copy_damaged", "verificação: uma cópia selada está danificada ou ausente; ela não é mais servida e será substituída a partir de uma réplica saudável"},
	{"scrub: could not mark a damaged copy in the store", "scrub.mark_failed", "verificação: não foi possível marcar uma cópia danificada no armazenamento"},
	{"scrub: recording a damaged copy in the metadata failed; the next pass retries", "scrub.record_failed", "verificação: falha ao registrar uma cópia danificada nos metadados; a próxima passagem tenta de novo"},

	// The control plane: metadata groups on Raft (internal/control).
	{"control: raft host stopped", "control.raft_host_stopped", "controle: o host do raft parou"},
	{"control: host groups", "control.host_groups_failed", "controle: falha ao hospedar os grupos"},
	{"control: log holds groups but no root: not bootstrapping; waiting for Join", "control.no_root", "controle: o log contém grupos, mas nenhuma raiz: não inicializa; aguardando Join"},
	{"control: answered before the local replica applied the write", "control.answered_before_apply", "controle: respondeu antes de a réplica local aplicar a gravação"},
	{"control: rebalance committed", "control.rebalance_committed", "controle: rebalanceamento confirmado"},
	{"control: automatic rebalance committed", "control.auto_rebalance_committed", "controle: rebalanceamento automático confirmado"},
	{"control: automatic rebalance not committed", "control.auto_rebalance_not_committed", "controle: rebalanceamento automático não confirmado"},
	{"control: automatic rebalance refused", "control.auto_rebalance_refused", "controle: rebalanceamento automático recusado"},
	{"control: leadership transfer", "control.leadership_transfer", "controle: transferência de liderança"},
	{"control: leadership transfer not started", "control.leadership_transfer_not_started", "controle: transferência de liderança não iniciada"},
	{"control: replica change", "control.replica_change", "controle: mudança de réplica"},
	{"control: replica change failed", "control.replica_change_failed", "controle: falha na mudança de réplica"},
	{"control: replica change held back", "control.replica_change_held", "controle: mudança de réplica adiada"},

	// Gossip membership (internal/membership).
	{"gossip started", "membership.gossip_started", "gossip iniciado"},
	{"refusing to join", "membership.join_refused", "recusando a entrada no cluster"},
	{"refusing member", "membership.member_refused", "recusando um membro"},
	{"member departed", "membership.member_departed", "um membro saiu"},
	{"member has unreadable metadata", "membership.member_metadata_unreadable", "um membro tem metadados ilegíveis"},
	{"departed member has unreadable metadata", "membership.departed_metadata_unreadable", "um membro que saiu tem metadados ilegíveis"},
	{"members departed before this node heard of them", "membership.departed_learned", "membros saíram antes de este nó saber deles"},
	{"a peer's departed members are unreadable; ignored", "membership.departed_members_unreadable", "os membros que saíram, segundo um par, estão ilegíveis; ignorados"},
	{"member table full", "membership.table_full", "a tabela de membros está cheia"},
	{"two nodes claim one node id", "membership.node_id_conflict", "dois nós reivindicam o mesmo id de nó"},
	{"left the cluster", "membership.left", "saiu do cluster"},
	{"leave withdrawn", "membership.leave_withdrawn", "saída cancelada"},
	{"leave withdrawn locally; members learn it with the next sync", "membership.leave_withdrawn_locally", "saída cancelada localmente; os membros ficam sabendo na próxima sincronização"},

	// Node-to-node connections (internal/peer).
	{"peer: accept failed", "peer.accept_failed", "par: falha ao aceitar uma conexão"},
	{"peer: refused a connection", "peer.connection_refused", "par: uma conexão foi recusada"},
	{"peer: connect failed", "peer.connect_failed", "par: falha ao conectar"},
	{"peer: connection ended", "peer.connection_ended", "par: conexão encerrada"},
	{"peer: closed a connection for a bad frame", "peer.bad_frame", "par: uma conexão foi fechada por um quadro inválido"},
	{"peer: unexpected frame on an inbound connection", "peer.unexpected_inbound_frame", "par: quadro inesperado em uma conexão de entrada"},
	{"peer: unexpected frame on an outbound connection", "peer.unexpected_outbound_frame", "par: quadro inesperado em uma conexão de saída"},
	{"peer: closing a connection whose answers are not read", "peer.unread_answers", "par: fechando uma conexão cujas respostas não são lidas"},

	// Record replication between nodes (internal/replica).
	{"replica: an append refused", "replica.append_refused", "réplica: uma gravação foi recusada"},
	{"replica: an append for a copy not kept here", "replica.append_copy_not_here", "réplica: uma gravação para uma cópia que não é mantida aqui"},
	{"replica: a copy's fsync failed", "replica.fsync_failed", "réplica: falha no fsync de uma cópia"},
	{"replica: the store refused a copy's batch", "replica.batch_refused", "réplica: o armazenamento recusou um lote de uma cópia"},
	{"replica: a bad replication message", "replica.bad_message", "réplica: uma mensagem de replicação inválida"},
	{"replica: catch-up read failed", "replica.catchup_read_failed", "réplica: falha na leitura de recuperação"},
	{"replica: catch-up read refused", "replica.catchup_read_refused", "réplica: leitura de recuperação recusada"},

	// The client library (pkg/client), when an application gives it this
	// handler.
	{"malachi: connection lost, dialling again", "client.connection_lost", "malachi: conexão perdida, reconectando"},
	{"malachi: dial failed", "client.dial_failed", "malachi: falha ao conectar"},
	{"malachi: dial failed, trying the next address", "client.dial_next_address", "malachi: falha ao conectar, tentando o próximo endereço"},
	{"malachi: request retried", "client.request_retried", "malachi: requisição reenviada"},
	{"malachi: produce retried", "client.produce_retried", "malachi: produção reenviada"},
}
